import Coordination
import FileCoordination
import Foundation
import TestSupport
import Testing

/// The S rules: named services, in one process. (Across processes: the control socket.)
@Suite struct ServiceRules {
    /// A provider that answers each line it reads with "<name>: <line>".
    static func echo(_ name: String) -> @Sendable (FileHandle, URL) -> Void {
        { handle, item in
            while let line = handle.readLine() {
                handle.write(Data("\(name) \(item.lastPathComponent): \(line)\n".utf8))
            }
            try? handle.close()
        }
    }

    @Test("S1 a provider vends named services for the items it manages") func s1() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        let status = try FileProviderServices.vend(
            named: "org.example.sync-status", forItemAt: dir, domain: fx.domain, handler: Self.echo("status"))
        let open = try FileProviderServices.vend(
            named: "org.example.open.v2", forItemAt: dir, domain: fx.domain, handler: Self.echo("open"))
        #expect(status.name == "org.example.sync-status" && open.name == "org.example.open.v2")
        #expect(
            Set(try FileProviderServices.services(forItemAt: dir, domain: fx.domain).keys) == [
                "org.example.sync-status", "org.example.open.v2"
            ])
    }

    @Test("S2 a client gets a map from name to service for an item, or an error") func s2() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        let deep = try fx.file("managed/a/b/c.txt")
        _ = try FileProviderServices.vend(named: "svc", forItemAt: dir, domain: fx.domain, handler: Self.echo("svc"))
        let services = try FileProviderServices.services(forItemAt: deep, domain: fx.domain)
        #expect(services["svc"]?.itemURL == deep)
        #expect(throws: FileCoordinationError.self) {
            try FileProviderServices.services(forItemAt: URL(string: "https://example.com/x")!, domain: fx.domain)
        }
        #expect(throws: FileCoordinationError.noSuchService("missing")) {
            try FileProviderServices.service(named: "missing", forItemAt: deep, domain: fx.domain)
        }
    }

    @Test("S3 a connection carries messages both ways; the nearest provider wins") func s3() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        let sub = try fx.directory("managed/sub")
        let file = try fx.file("managed/sub/doc.txt")
        _ = try FileProviderServices.vend(named: "svc", forItemAt: dir, domain: fx.domain, handler: Self.echo("outer"))
        _ = try FileProviderServices.vend(named: "svc", forItemAt: sub, domain: fx.domain, handler: Self.echo("inner"))
        let connection = try FileProviderServices.service(named: "svc", forItemAt: file, domain: fx.domain).connection()
        connection.write(Data("hello\n".utf8))
        #expect(connection.readLine() == "inner doc.txt: hello")
        connection.write(Data("again\n".utf8))
        #expect(connection.readLine() == "inner doc.txt: again")
        try connection.close()
        let outer = try FileProviderServices.service(
            named: "svc", forItemAt: try fx.file("managed/top.txt"), domain: fx.domain
        ).connection()
        outer.write(Data("x\n".utf8))
        #expect(outer.readLine() == "outer top.txt: x")
    }

    @Test("S4 items outside the provider's subtree have no such service") func s4() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        let outside = try fx.file("elsewhere/file")
        let registration = try FileProviderServices.vend(
            named: "svc", forItemAt: dir, domain: fx.domain, handler: Self.echo("svc"))
        #expect(try FileProviderServices.services(forItemAt: outside, domain: fx.domain).isEmpty)
        #expect(try FileProviderServices.services(forItemAt: fx.root, domain: fx.domain).isEmpty)
        let service = try FileProviderServices.service(named: "svc", forItemAt: dir, domain: fx.domain)
        registration.withdraw()
        #expect(try FileProviderServices.services(forItemAt: dir, domain: fx.domain).isEmpty)
        #expect(throws: FileCoordinationError.noSuchService("svc")) { try service.connection() }
    }

    @Test("S5 names and protocols are the parties' own: any name, bytes carried unchanged") func s5() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        let bytes = Data((0..<256).map { UInt8($0) })
        _ = try FileProviderServices.vend(named: "com.example.binary-protocol.v7", forItemAt: dir, domain: fx.domain) {
            handle, _ in
            let received = handle.readExactly(256)
            handle.write(Data(received.reversed()))
            try? handle.close()
        }
        let connection = try FileProviderServices.service(
            named: "com.example.binary-protocol.v7", forItemAt: dir, domain: fx.domain
        ).connection()
        connection.write(bytes)
        #expect(connection.readExactly(256) == Data(bytes.reversed()))
        for bad in ["", String(repeating: "n", count: 256), "two\nlines"] {
            #expect(throws: FileCoordinationError.self) {
                try FileProviderServices.vend(named: bad, forItemAt: dir, domain: fx.domain) { _, _ in }
            }
        }
        #expect(throws: FileCoordinationError.self) {
            try FileProviderServices.vend(named: "x", forItemAt: fx.url("missing"), domain: fx.domain) { _, _ in }
        }
    }
}

extension FileHandle {
    /// Reads up to a newline (without it); nil at end of file.
    func readLine() -> String? {
        var bytes: [UInt8] = []
        while true {
            guard let chunk = try? read(upToCount: 1), let byte = chunk.first else {
                return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
    }

    func readExactly(_ count: Int) -> Data {
        var data = Data()
        while data.count < count, let chunk = try? read(upToCount: count - data.count), !chunk.isEmpty { data += chunk }
        return data
    }
}
