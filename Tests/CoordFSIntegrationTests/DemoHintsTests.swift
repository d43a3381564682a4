import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `make run`'s hints (Mounts/demo.hints) do what they say: each command as written, against a
/// mount of the demo profile, in the terminal it names. (They said an appending open held a
/// write that kept `cat` out, and that a directory's watch heard every message.)
@Suite struct DemoHints {
    let binary = Paths.binary.path

    /// A hint: its command with the mount point and the command filled in, what it says it
    /// does, and for the walk-through the terminal it is typed in.
    struct Hint {
        let terminal: Int?
        let command: String
        let says: String
    }

    /// The hints, as `make run` prints them for the mount `fx`.
    static func hints(for fx: MountFixture, binary: String) throws -> [Hint] {
        let text = try String(contentsOf: Paths.repository.appendingPathComponent("Mounts/demo.hints"), encoding: .utf8)
        var hints: [Hint] = [], heading: [String] = []
        for line in text.split(separator: "\n").map(String.init) where !line.hasPrefix("#") {
            let filled = line.replacingOccurrences(of: "{DEMO}", with: fx.mountPoint.path).replacingOccurrences(
                of: "{COORDFS}", with: binary)
            let words = filled.trimmingCharacters(in: .whitespaces)
            if let terminal = words.first?.wholeNumberValue, words.dropFirst().hasPrefix("$ "),
                let comment = words.range(of: "  # ", options: .backwards)
            {
                let command = words[words.index(words.startIndex, offsetBy: 3)..<comment.lowerBound]
                hints.append(
                    Hint(
                        terminal: terminal, command: command.trimmingCharacters(in: .whitespaces),
                        says: String(words[comment.upperBound...])))
            } else if filled.hasPrefix("      ") {
                hints.append(Hint(terminal: nil, command: words, says: heading.joined(separator: " ")))
                heading = []
            } else {
                heading.append(words)
            }
        }
        return hints
    }

    /// A mount of the demo profile, as `make run` makes one, holding the demo's notes.
    static func demoMount() throws -> MountFixture {
        let fx = try MountFixture(["--profile", Paths.repository.appendingPathComponent("Mounts/demo.profile").path])
        let notes = Paths.repository.appendingPathComponent("Mounts/demo/notes/todo.txt")
        try fx.seed("notes/todo.txt", try String(contentsOf: notes, encoding: .utf8))
        return fx
    }

    /// A terminal: bash reading what is typed from a pipe; each command's output (its errors
    /// too) and status once it has ended.
    final class Terminal {
        let shell: Child
        private var output: [String] = []

        init() throws {
            shell = try Child("/bin/bash", ["--norc", "--noprofile"])
            shell.send("exec 2>&1")
        }

        var pid: Int32 { shell.pid }

        func type(_ command: String) {
            shell.send(command)
            shell.send("echo \"=== $?\"")
        }

        /// The output and status of the command typed last, once it has ended; nil if it has
        /// not within `timeout`.
        func ended(within timeout: Duration = .seconds(10)) -> (output: [String], status: Int32)? {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline, let line = shell.next(timeout: deadline - ContinuousClock.now) {
                guard line.hasPrefix("=== ") else { output.append(line); continue }
                defer { output = [] }
                return (output, Int32(line.dropFirst(4)) ?? -1)
            }
            return nil
        }
    }

    /// The walk-through: an append shares the file with readers; flock's descriptor form then
    /// holds it for the shell, so an O_NONBLOCK open fails at once and cat waits, as status
    /// shows, until the shell closes the descriptor.
    @Test func theWalkThroughInTwoTerminalsDoesWhatItSays() throws {
        let fx = try Self.demoMount()
        let steps = try Self.hints(for: fx, binary: binary).filter { $0.terminal != nil }
        try #require(steps.map(\.terminal) == [1, 2, 1, 2, 2, 1, 1], "the hints changed: change this test with them")
        let contents = try String(contentsOfFile: fx.backingPath("notes/todo.txt"), encoding: .utf8).split(
            separator: "\n"
        ).map(String.init)
        let one = try Terminal(), two = try Terminal()
        // 1$ exec 3>>todo.txt: this shell appends, and an append shares the file with readers:
        one.type(steps[0].command)
        #expect(one.ended()?.status == 0)
        // 2$ cat todo.txt: so cat reads at once.
        #expect(steps[1].says.contains("reads at once"))
        two.type(steps[1].command)
        let read = two.ended(within: .seconds(2))
        #expect(read?.status == 0 && read?.output == contents, "\(String(describing: read))")
        // 1$ coordfs coordinate -x 3: now the shell holds a write of the file.
        #expect(steps[2].says.contains("holds a write"))
        one.type(steps[2].command)
        #expect(one.ended()?.status == 0)
        // 2$ python3 … O_NONBLOCK: fails at once, BlockingIOError.
        #expect(steps[3].says.contains("fails at once") && steps[3].says.contains("BlockingIOError"))
        let asked = ContinuousClock.now
        two.type(steps[3].command)
        let refused = two.ended(within: .seconds(5))
        #expect(
            refused?.status == 1 && refused?.output.contains { $0.contains("BlockingIOError") } == true,
            "\(String(describing: refused))")
        #expect(ContinuousClock.now - asked < .seconds(3))
        // 2$ cat todo.txt: waits, past the settle time (a hold never settles) ...
        #expect(steps[4].says.contains("waits"))
        two.type(steps[4].command)
        #expect(two.ended(within: .seconds(2.5)) == nil, "cat did not wait for the shell's hold")
        // 1$ coordfs status: ... the shell's HOLD and cat's WAIT ...
        #expect(steps[5].says.contains("HOLD") && steps[5].says.contains("WAIT"))
        one.type(steps[5].command)
        let rows = one.ended()?.output ?? []
        #expect(
            rows.contains { $0.hasPrefix("HOLD") && $0.contains(" \(one.pid) ") && $0.contains("todo.txt") }, "\(rows)")
        #expect(rows.contains { $0.hasPrefix("WAIT") && $0.contains("cat") && $0.contains("todo.txt") }, "\(rows)")
        // 1$ exec 3>&-: ... until the shell closes descriptor 3: then cat reads.
        one.type(steps[6].command)
        #expect(one.ended()?.status == 0)
        let waited = two.ended(within: .seconds(5))
        #expect(waited?.status == 0 && waited?.output == contents, "\(String(describing: waited))")
    }

    /// The other hints: a file's watch hears every coordination message about it (a read asks
    /// it, an append tells it); a directory's hears what happens inside it and nothing of a
    /// read; a hold while a command runs keeps a cat out until the editor quits; the demo runs.
    @Test func theOtherHintsDoWhatTheySay() throws {
        let fx = try Self.demoMount()
        let hints = try Self.hints(for: fx, binary: binary).filter { $0.terminal == nil }
        try #require(hints.count == 4, "the hints changed: change this test with them")
        let todo = fx.path("notes/todo.txt")

        // coordfs watch notes/todo.txt: every coordination message about one file.
        #expect(hints[0].says.contains("Every coordination message about one file"))
        let file = try Child("/bin/sh", ["-c", "exec " + hints[0].command])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/bin/cat", [todo]).status == 0)
        #expect(file.next()?.hasPrefix("\(todo) RELINQUISH_READER,REQUEST cookie=") == true)
        #expect(try run("/bin/sh", ["-c", "echo more >> \"$0\"", todo]).status == 0)
        var heard: [String] = []
        while let line = file.next(timeout: .seconds(2)) {
            heard.append(line)
            if line.hasPrefix("\(todo) CHANGED") { break }
        }
        #expect(heard.contains { $0.hasPrefix("\(todo) CHANGED") && $0.contains(" command=sh ") }, "\(heard)")

        // coordfs watch notes: items made inside; a read of a file inside tells it nothing.
        #expect(hints[1].says.contains("items made") && hints[1].says.contains("never of its directory's"))
        let directory = try Child("/bin/sh", ["-c", "exec " + hints[1].command])
        #expect(eventually { (try? fx.state())?.components(separatedBy: "PRESENT").count == 3 })
        #expect(try run("/bin/cat", [todo]).status == 0)
        #expect(try run("/bin/sh", ["-c", "echo new > \"$0\"", fx.path("notes/new.txt")]).status == 0)
        #expect(
            withoutOrigin(directory.next()) == "\(fx.path("notes")) SUBITEM_APPEARED new.txt",
            "the read was told to the directory")

        // coordfs coordinate -x todo.txt -- ${EDITOR:-vi} todo.txt: a cat elsewhere waits until the editor quits.
        #expect(hints[2].says.contains("waits until the editor quits"))
        let editor = fx.base.appendingPathComponent("editor").path
        try Data("#!/bin/sh\necho 'from the editor' >> \"$1\"\nread line\n".utf8).write(
            to: URL(fileURLWithPath: editor))
        chmod(editor, 0o755)
        let session = try Child("/usr/bin/env", ["EDITOR=\(editor)", "/bin/sh", "-c", hints[2].command])
        #expect(eventually { (try? fx.state())?.contains("HOLD") == true })
        let reader = try Child("/bin/cat", [todo])
        #expect(reader.waitForExit(timeout: .seconds(2)) == nil, "cat did not wait for the editor")
        session.send("quit")
        #expect(session.waitForExit() == 0)
        #expect(reader.waitForExit() == 0)
        var lines: [String] = []
        while let line = reader.next(timeout: .milliseconds(500)) { lines.append(line) }
        #expect(lines.last == "from the editor", "\(lines)")

        // coordfs demo: presenters' messages inside one process, narrated.
        let demo = try run("/bin/sh", ["-c", hints[3].command])
        #expect(demo.status == 0 && demo.output.contains("editor"), "\(demo)")
    }
}
