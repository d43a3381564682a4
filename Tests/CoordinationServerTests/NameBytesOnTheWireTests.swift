import Coordination
import CoordinationRuntime
import CoordinationWire
import Foundation
import Testing

/// A name that is not UTF-8 crosses the socket intact: its bytes are the lone surrogates
/// \udc80…\udcff on the wire, as Python's surrogateescape spells them, in both directions.
@Suite struct NameBytesOnTheWireTests {
    static let latin1: [UInt8] = Array("/m/caf".utf8) + [0xE9]
    static var path: String { FileSystemName.string(latin1) }

    @Test func anEventNamesTheBytesAsSurrogateEscapes() throws {
        let event = ServerMessage.event(EventRecord(wd: 1, mask: [.changed], cookie: 0, name: "", path: Self.path))
        let line = WireCodec.encode(event)
        #expect(String(decoding: line, as: UTF8.self).contains(#""path":"/m/caf\udce9""#))
        #expect(try WireCodec.decodeServer(line) == event)
    }

    @Test func aClientsSurrogateEscapeIsTheByte() throws {
        let message = try WireCodec.decodeClient(Array(#"{"id":2,"op":"watch","path":"/m/caf\udce9"}"#.utf8))
        guard case .watch(_, let path, _) = message else { Issue.record("\(message)"); return }
        #expect(FileSystemName.bytes(path) == Self.latin1)
        // Any other lone surrogate is still refused.
        #expect(throws: WireError.self) {
            try WireCodec.decodeClient(Array(#"{"id":2,"op":"watch","path":"/m/\ud800"}"#.utf8))
        }
        #expect(throws: WireError.self) {
            try WireCodec.decodeClient(Array(#"{"id":2,"op":"watch","path":"/m/\udc41"}"#.utf8))
        }
    }

    /// What Python reads from the line is the name: `os.fsencode` gives its bytes back.
    @Test func pythonGetsTheBytesBack() throws {
        let line = WireCodec.encode(.event(EventRecord(wd: 1, mask: [.changed], cookie: 0, name: "", path: Self.path)))
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        python.arguments = [
            "-c",
            "import json, os, sys; sys.stdout.buffer.write(os.fsencode(json.loads(sys.stdin.buffer.read())['path']))"
        ]
        let input = Pipe(), output = Pipe()
        python.standardInput = input
        python.standardOutput = output
        try python.run()
        input.fileHandleForWriting.write(Data(line))
        try input.fileHandleForWriting.close()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        python.waitUntilExit()
        #expect(python.terminationStatus == 0 && Array(bytes) == Self.latin1)
    }
}
