import Foundation
import LinuxSystem
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The system's log: the journal, or a syslog daemon, through the socket both listen on
/// (/dev/log). A mount that runs detached from its terminal logs there unless it is given a
/// file (`--log`, a profile's `log`, `-o log=`): each line as syslog(3) sends one, under
/// `coordfs[PID]`, with the mount point first, so that `journalctl -t coordfs` shows every
/// mount's. (`COORDFS_SYSLOG_SOCKET` names another socket: the test that reads what a mount
/// logs listens there; nothing else needs it.)
final class SystemLog: Sendable {
    /// The socket the system log listens on.
    static var socketPath: String { ProcessInfo.processInfo.environment["COORDFS_SYSLOG_SOCKET"] ?? "/dev/log" }

    /// syslog's facility for daemons (LOG_DAEMON, 3 << 3).
    private static let facility: Int32 = 3 << 3

    private let path: String
    /// What each line begins with after its priority and time: "coordfs[PID]: /mnt: ".
    private let prefix: String
    /// A datagram socket connected to `path`; -1 while it is not (the journal restarted).
    private let socket = Mutex<Int32>(-1)

    /// The system log for the mount at `mountPoint`; nil where nothing listens for it (no
    /// /dev/log: a container, say).
    init?(mountPoint: String) {
        path = Self.socketPath
        prefix = "coordfs[\(getpid())]: \(mountPoint): "
        guard let fd = Self.connect(path) else { return nil }
        socket.withLock { $0 = fd }
    }

    deinit {
        socket.withLock { if $0 >= 0 { close($0) } }
    }

    private static func connect(_ path: String) -> Int32? {
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        let connected = (try? UnixSocket.withAddress(path) { Glibc.connect(fd, $0, $1) }) ?? -1
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Sends `text` as one line at `level`: `<PRI>Mmm dd hh:mm:ss coordfs[PID]: MOUNT: TEXT`.
    /// A line the log cannot take now is dropped (a log must never hold up a request); once
    /// the listener has gone, the socket is connected again for the next.
    func send(_ level: Logger.Level, _ text: String) {
        var now = time(nil), local = tm()
        localtime_r(&now, &local)
        var stamp = [CChar](repeating: 0, count: 32)
        let length = strftime(&stamp, stamp.count, "%b %e %H:%M:%S", &local)
        let time = String(decoding: stamp.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let bytes = Array("<\(Self.facility | Self.severity(level))>\(time) \(prefix)\(text)".utf8)
        socket.withLock { fd in
            for _ in 0..<2 {
                if fd < 0, let again = Self.connect(path) { fd = again }
                guard fd >= 0 else { return }
                if Glibc.send(fd, bytes, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) >= 0 { return }
                // Full (EAGAIN): dropped. Gone (ECONNREFUSED, ENOTCONN): connected again once.
                guard [.connectionRefused, .socketNotConnected].contains(Errno.ofFailedCall()) else { return }
                close(fd)
                fd = -1
            }
        }
    }

    /// syslog's severity of a level: LOG_DEBUG 7 to LOG_CRIT 2.
    static func severity(_ level: Logger.Level) -> Int32 {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// swift-log's handler for this log: one line a message, its metadata after it.
    struct Handler: LogHandler {
        let destination: SystemLog
        var logLevel: Logger.Level = .info
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = metadata.merging(event.metadata ?? [:]) { $1 }
            let extra =
                fields.isEmpty
                ? "" : " " + fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            destination.send(event.level, "\(event.message)\(extra)")
        }
    }
}
