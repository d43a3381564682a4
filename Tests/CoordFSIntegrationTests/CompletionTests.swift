import Foundation
import Testing

/// The shell completions `make install` puts in place, tried as bash runs them: paths complete
/// as files and directories, and the words coordfs takes (event names, status columns, answers,
/// options) complete as words.
@Suite struct CompletionTests {
    /// What bash offers for the last of `words`, with the generated script loaded.
    func offered(_ words: [String]) throws -> [String] {
        let script = """
            source <("$1" --generate-completion-script bash)
            # The words it asks coordfs itself for (`unmount`'s mount points) come from the
            # coordfs on the PATH, as once installed.
            PATH="$(dirname "$1"):$PATH"
            shift
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
            _coordfs coordfs "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let result = try run("/bin/bash", ["-c", script, "bash", Paths.binary.path] + words)
        #expect(result.status == 0, "\(result)")
        return result.output.split(separator: "\n").map(String.init).sorted()
    }

    @Test func pathsCompleteAsFilesAndWordsAsWords() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "completion-\(UUID().uuidString.prefix(8))"
        ).path
        try FileManager.default.createDirectory(atPath: directory + "/documents", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(FileManager.default.createFile(atPath: directory + "/docs.txt", contents: Data()))
        for command in [
            ["watch"], ["status"], ["versions"], ["services"], ["coordinate", "--write"], ["coordinate", "-s"]
        ] {
            #expect(
                try offered(["coordfs"] + command + [directory + "/do"]) == [
                    directory + "/docs.txt", directory + "/documents"
                ],
                "coordfs \(command.joined(separator: " ")) completes paths")
        }
        #expect(try offered(["coordfs", "watch", "-e", "close"]) == ["close", "close_write"], "inotifywait's names")
        #expect(
            try offered(["coordfs", "watch", "-e", "CONF"]) == ["CONFLICT", "CONFLICT_RESOLVED"], "coordfs's own names")
        #expect(try offered(["coordfs", "watch", "-e", "acc"]).isEmpty, "names never told are not offered")
        #expect(try offered(["coordfs", "watch", "--answer", "E"]).contains("EACCES"))
        #expect(try offered(["coordfs", "status", "-o", "PI"]) == ["PID"])
        #expect(try offered(["coordfs", "coordinate", "--write-option", "forM"]) == ["forMerging", "forMoving"])
    }

    /// `unmount` offers coordfs's mount points, not every directory (as `umount` offers mounts).
    @Test func unmountCompletesCoordfsMountPointsOnly() throws {
        let fx = try MountFixture()
        let mountPoint = fx.mountPoint.path
        let parent = fx.mountPoint.deletingLastPathComponent().path
        #expect(try offered(["coordfs", "unmount", parent + "/"]) == [mountPoint], "the mount point, not its siblings")
        #expect(try offered(["coordfs", "unmount", mountPoint]) == [mountPoint])
        #expect(try offered(["coordfs", "unmount", parent + "/nothing-"]).isEmpty)
    }
}
