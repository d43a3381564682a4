import LinuxSystem
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// glibc 2.34's, which Swift's Glibc module does not carry.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func c_addclosefrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32

/// The user's coordination daemon, which Swift programs and commands coordinate through outside
/// any mount, as Apple's processes do through theirs: found at `$COORDFS_SOCKET` or the user's
/// default socket, and started on first use where none runs (as gpg-agent is): detached, one per
/// user, ending once no client has been connected for `idleSeconds`.
public enum UserDaemon {
    /// How long a daemon started here serves no client before it ends.
    public static let idleSeconds = 60

    /// The daemon's socket — `$COORDFS_SOCKET`, else the user's default — started there if
    /// need be; or why there is none.
    public static func socket(starting: Bool = true) -> Result<String, ControlError> {
        let environment = ProcessInfo.processInfo.environment["COORDFS_SOCKET"]
        let given = environment?.isEmpty == false ? environment : nil
        let path = given ?? WireProtocol.daemonSocketPath
        if isServed(path, trusting: given != nil) { return .success(path) }
        guard starting else { return .failure(ControlError("ENOENT", "no coordfs daemon serves \(path)")) }
        guard let command = executable() else {
            return .failure(
                ControlError(
                    "ENOENT",
                    "no coordfs daemon serves \(path), and no coordfs command was found to start one "
                        + "(looked beside this program and on $PATH)"))
        }
        if let failure = start(command, socket: given) { return .failure(failure) }
        // It binds its socket within moments, or seconds on a loaded machine whose page cache
        // does not hold the program yet; a daemon another process started at the same time may
        // be the one that serves (the daemon's lock lets one of them run). Given up, the caller
        // coordinates with no other process: better late than that.
        for _ in 0..<1500 {
            if isServed(path, trusting: given != nil) { return .success(path) }
            usleep(10_000)
        }
        return .failure(
            ControlError("ETIMEDOUT", "started '\(command) daemon', but nothing served \(path) within 15 s"))
    }

    /// Whether a server answers at `path`, in a directory only the user (or root) may write
    /// unless the path was given (`trusting`).
    static func isServed(_ path: String, trusting: Bool = false) -> Bool {
        guard trusting || ControlClient.isTrusted(directoryOf: path) else { return false }
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes); raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        } == 0
    }

    /// The coordfs command: this very program when it is coordfs, else one beside this program
    /// (a package's build directory), else the first on $PATH.
    static func executable() -> String? {
        let own = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        if (own as NSString).lastPathComponent == "coordfs" { return own }
        var candidates = [((own as NSString).deletingLastPathComponent as NSString).appendingPathComponent("coordfs")]
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(
            separator: ":")
        {
            candidates.append(String(directory) + "/coordfs")
        }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts `command daemon` in a session of its own, through a shell that ends at once: the
    /// daemon is nobody's child here (no zombie when it ends), no terminal's signals reach it,
    /// and it keeps none of this process's descriptors (a test's pipes would never see their end).
    private static func start(_ command: String, socket: String?) -> ControlError? {
        let script = #"exec "$0" daemon --exit-when-idle "$1" ${2:+--socket "$2"} </dev/null >/dev/null 2>&1 &"#
        let arguments = ["/bin/sh", "-c", script, command, String(idleSeconds), socket ?? ""]
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(0x80))  // POSIX_SPAWN_SETSID (glibc 2.26), not in Swift's Glibc
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        _ = c_addclosefrom(&actions, 3)
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var shell: pid_t = 0
        let code = posix_spawn(&shell, "/bin/sh", &actions, &attributes, &argv, environ)
        guard code == 0 else {
            return ControlError(
                ErrnoNames.name(of: code), "cannot start '\(command) daemon': \(String(cString: strerror(code)))")
        }
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(shell, &status, 0) }
        return nil
    }
}
