// The control socket's fuzz target (libFuzzer): each input is what one client sends. It is
// decoded line by line as the server decodes it, then served whole, after a hello, by a real
// server over a socket pair, on items of a small tree in /tmp/coordfs-fuzz (which the seed
// corpus in Tests/Fuzz/corpus names). Nothing may trap, hang or leak a descriptor.
//
//     make fuzz FUZZ_SECONDS=600
//
// Built by `make fuzz` with -sanitize=fuzzer,address and -parse-as-library (libFuzzer has the
// main); the ordinary build makes a program that does nothing.
import CoordinationServer
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The server every input is served by, and the tree its items lie in.
final class FuzzFixture: Sendable {
    static let tree = "/tmp/coordfs-fuzz"
    let server: ControlServer
    let hello = Array(#"{"op":"hello","id":1,"version":1}"#.utf8) + [10]

    init() {
        for directory in [Self.tree, Self.tree + "/dir", Self.tree + "/dir/sub"] { mkdir(directory, 0o755) }
        for file in ["a", "b", "dir/c", "dir/sub/d"] {
            _ = FileManager.default.createFile(atPath: Self.tree + "/" + file, contents: Data("x".utf8))
        }
        let domain = CoordinationDomain()
        domain.presenterTimeout = .milliseconds(50)
        server = ControlServer(
            socketPath: Self.tree + "/unused.sock", mode: 0o600, domain: domain,
            resolver: HostItemResolver(domain: domain), root: "/")
        server.waitTimeout = .milliseconds(200)
    }
}

let fixture = FuzzFixture()

/// Open descriptors of this process now (the listing's own descriptor left out).
func openDescriptors() -> Int {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? 1) - 1
}

/// Inputs run, and the descriptors open after the first: every thousandth input checks that
/// what one input opens it closes (connections, sockets, watches' and services' descriptors).
nonisolated(unsafe) var runs = 0
nonisolated(unsafe) var descriptorsAtStart = -1

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    // The decoder alone, every line.
    for line in input.split(separator: 10, omittingEmptySubsequences: true) {
        _ = try? WireCodec.decodeClient(Array(line))
    }
    // The server: the client's lines after a hello, then its end; replies drained meanwhile.
    var ends: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
        return 0
    }
    let client = ends[0]
    let drained = DispatchSemaphore(value: 0)
    Thread {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while read(client, &buffer, buffer.count) > 0 {}
        drained.signal()
    }.start()
    (fixture.hello + input).withUnsafeBytes { bytes in
        var offset = 0
        while offset < bytes.count {
            let count = send(client, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if count <= 0 { break }
            offset += count
        }
    }
    shutdown(client, Int32(SHUT_WR))
    fixture.server.serve(connected: ends[1])
    drained.wait()
    close(client)
    runs += 1
    if runs == 1 { descriptorsAtStart = openDescriptors() }
    if runs % 1000 == 0, openDescriptors() > descriptorsAtStart + 64 {
        fatalError(
            "descriptors leak: \(openDescriptors()) open after \(runs) inputs, \(descriptorsAtStart) after the first")
    }
    return 0
}

#if FUZZING
// libFuzzer's driver, started from the program's entry (SwiftPM names it CoordFSFuzz_main).
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ body: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("CoordFSFuzz_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments, fuzz)
}
#endif
