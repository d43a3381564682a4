import LinuxSystem
import ArgumentParser
import CoordinationClient
import CoordinationRuntime
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// flock's descriptor form: `exec 9>>FILE; coordfs coordinate -x 9` holds FILE for the shell
/// and its children until the shell closes descriptor 9 or ends.
///
/// A hold lives as long as the connection it was taken on, and the shell cannot keep one. So a
/// holder goes on in the background, in a session of its own, with a copy of descriptor 9: it
/// takes the hold for the shell (the server checks the shell is an ancestor of the same user),
/// says whether it got it, and lets go once the shell's descriptor 9 no longer shares its open
/// file (looked at every tenth of a second). `coordfs coordinate` returns when the holder has
/// said, with flock's exit statuses.
extension Coordinate {
    func holdDescriptor(_ fd: Int32) throws {
        if let shell = holdFor { return try holdInBackground(fd, for: shell) }
        guard fcntl(fd, F_GETFD) != -1 else {
            throw CommandFailure(
                "descriptor \(fd) is not open: open it in the shell first (exec \(fd)>>FILE), as for flock")
        }
        guard let path = Self.openPath(fd) else {
            throw CommandFailure("descriptor \(fd) is not open on a file or directory")
        }
        // -v: the holder takes the hold for the shell, so the shell's waiting hold is the one told of.
        let report: DispatchWorkItem? =
            if verbose, !nonblock, let socketPath = socket ?? (try? ControlClient.serverSocket(for: path).get()) {
                Self.sayWhomItWaitsFor(getppid(), at: socketPath)
            } else {
                nil
            }
        defer { report?.cancel() }
        var ends: [Int32] = [0, 0]
        do throws(Errno) { _ = try check(pipe(&ends)) } catch { throw CommandFailure("pipe: \(error.description)") }
        let (reading, writing) = (ends[0], ends[1])
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        defer { Glibc.close(reading) }
        let reportFD = max(fd, 2) + 1
        var arguments = [
            "coordfs", "coordinate", write.isEmpty ? "-s" : "-x", String(fd),
            "--hold-for", String(getppid()), "--report-to", String(reportFD)
        ]
        if nonblock { arguments.append("-n") }
        if let timeout { arguments += ["-w", String(timeout)] }
        if let socket { arguments += ["--socket", socket] }
        for option in readOption { arguments += ["--read-option", option] }
        if let writeOption { arguments += ["--write-option", writeOption] }
        let spawned = Self.spawnHolder(arguments, reportFrom: writing, as: reportFD)
        Glibc.close(writing)
        guard spawned == 0 else {
            throw CommandFailure("cannot start the holder: \(String(cString: strerror(spawned)))")
        }
        var said: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            guard let count = try? retryingInterrupts({ Glibc.read(reading, &buffer, buffer.count) }), count > 0 else {
                break
            }
            said += buffer[..<count]
        }
        let line = String(decoding: said, as: UTF8.self).trimmingCharacters(in: .newlines)
        if line == "ok" { return }
        let (kind, message) =
            line.firstIndex(of: " ").map { (String(line[..<$0]), String(line[line.index(after: $0)...])) }
            ?? (line, "the holder ended before it took the hold")
        FileHandle.standardError.write(Data("Error: cannot take the intents: \(message)\n".utf8))
        throw ExitCode(kind == "conflict" ? conflictExitCode : 1)
    }

    /// glibc's POSIX_SPAWN_SETSID (2.26 and later), which its Swift module does not show.
    private static let spawnSetsid: Int16 = 0x80

    /// Starts the holder: this executable again, in a session of its own (a Ctrl-C or hang-up
    /// of the shell's job does not reach it), with nothing of the terminal, descriptor `fd`
    /// of the shell's, and the pipe's end as `target`. Returns 0 or an errno.
    private static func spawnHolder(_ arguments: [String], reportFrom pipe: Int32, as target: Int32) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe, target)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Self.spawnSetsid)
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        return posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv, envp)
    }

    /// The holder: takes the hold for `shell`, reports, and keeps it while the shell's `fd` is
    /// the open file this process has a copy of.
    private func holdInBackground(_ fd: Int32, for shell: Int32) throws {
        let report = reportTo ?? -1
        func say(_ line: String) {
            _ = (line + "\n").withCString { Glibc.write(report, $0, strlen($0)) }
            Glibc.close(report)
        }
        guard let path = Self.openPath(fd) else {
            say("error descriptor \(fd) is not open on a file or directory"); throw ExitCode(1)
        }
        let intent =
            write.isEmpty
            ? WireIntent(path: path, access: .read, options: readOption.isEmpty ? nil : readOption)
            : WireIntent(path: path, access: .write, options: writeOption.map { [$0] })
        let socketPath: String
        if let socket {
            socketPath = socket
        } else {
            switch ControlClient.serverSocket(for: path) {
            case .success(let found): socketPath = found
            case .failure(let error): say("error \(error.message)"); throw ExitCode(1)
            }
        }
        let client: ControlClient
        let hold: Int
        do {
            client = try ControlClient(socketPath: socketPath)
            let fields = try client.request {
                .hold(id: $0, intents: [intent], wait: !nonblock, timeout: timeout, inherit: true, holder: Int(shell))
            }
            guard case .int(let number)? = fields["hold"] else { throw ControlError("EPROTO", "no hold in the reply") }
            hold = number
        } catch {
            let conflict = (error as? ControlError).map { $0.errno == "EAGAIN" || $0.errno == "EBUSY" } ?? false
            say(
                (conflict ? "conflict " : "error ") + "\(error)"
                    + (conflict ? Self.holders(of: [path], at: socketPath) : ""))
            throw ExitCode(1)
        }
        say("ok")
        while !client.isClosed && Self.shares(fd, with: shell) { usleep(100_000) }
        _ = try? client.request { .release(id: $0, hold: hold, changed: !write.isEmpty) }
        client.close()
    }

    /// The path `fd` is open on; nil for a pipe, a socket or a deleted file.
    static func openPath(_ fd: Int32) -> String? {
        guard let path = pathBytes(of: fd).map(FileSystemName.string) else { return nil }
        var info = stat()
        guard path.hasPrefix("/"), FileSystemName.withCString(path, { stat($0, &info) }) == 0 else { return nil }
        return path
    }

    /// Whether `shell`'s descriptor `fd` is still the open file this process's `fd` is: the
    /// same file, and the same offset and flags (an offset is the open file's, shared by its
    /// copies: a descriptor opened again on the same file has its own).
    static func shares(_ fd: Int32, with shell: Int32) -> Bool {
        var theirs = stat(), mine = stat()
        guard stat("/proc/\(shell)/fd/\(fd)", &theirs) == 0, fstat(fd, &mine) == 0,
            theirs.st_dev == mine.st_dev, theirs.st_ino == mine.st_ino,
            let info = ProcFile.read("/proc/\(shell)/fdinfo/\(fd)")
        else { return false }
        func field(_ name: String) -> String? {
            info.split(separator: "\n").first { $0.hasPrefix(name + ":") }.map {
                $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)
            }
        }
        let kept = O_ACCMODE | O_APPEND
        return field("pos") == String(lseek(fd, 0, SEEK_CUR))
            && field("flags").flatMap { Int32($0, radix: 8) }.map { $0 & kept == fcntl(fd, F_GETFL) & kept } ?? false
    }
}
