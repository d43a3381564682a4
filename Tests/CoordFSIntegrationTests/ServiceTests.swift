import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Named services across processes: providers vend for a subtree, clients find and connect.
@Suite struct NamedServices {
    let binary = Paths.binary.path

    /// A `coordfs vend` provider answering each line with "<label>: <line>".
    func provider(_ name: String, _ path: String, label: String) throws -> Child {
        let child = try Child(
            binary, ["vend", name, path, "--", "sh", "-c", "while read l; do echo \"\(label): $l\"; done"])
        return child
    }

    func services(_ path: String) throws -> [String] {
        try run(binary, ["services", path]).output.split(separator: "\n").map {
            String($0.split(separator: " ").first ?? "")
        }
    }

    func talk(_ path: String, _ name: String, _ input: String) throws -> (status: Int32, output: String, errors: String)
    {
        try run("/bin/sh", ["-c", "printf '\(input)' | \(binary) services '\(path)' --connect \(name)"])
    }

    @Test func aProviderVendsTwoNamesAndAClientDeepInsideConnectsBothWays() throws {
        let fx = try MountFixture()
        try fx.seed("project/src/deep/file.txt")
        let echo = try provider("org.example.echo", fx.path("project"), label: "echo")
        let status = try provider("org.example.status", fx.path("project"), label: "status")
        defer { withExtendedLifetime((echo, status)) {} }
        let deep = fx.path("project/src/deep/file.txt")
        #expect(eventually { (try? services(deep)) == ["org.example.echo", "org.example.status"] })
        let reply = try talk(deep, "org.example.echo", "hello\\nagain\\n")
        #expect(reply.output == "echo: hello\necho: again\n", "\(reply.errors)")
        #expect(try talk(deep, "org.example.status", "ping\\n").output == "status: ping\n")
        // Outside the subtree: nothing; an unknown name: a clear error.
        try fx.seed("elsewhere.txt")
        let none = try run(binary, ["services", fx.path("elsewhere.txt")])
        #expect(none.status == 0 && none.output.isEmpty && none.errors.contains("no services for"))
        let unknown = try talk(deep, "org.example.missing", "x\\n")
        #expect(unknown.status != 0 && unknown.errors.contains("no service named 'org.example.missing'"))
    }

    /// `--json`: the list as one object, the protocol's own reply, for scripts; an item with no
    /// services, an empty list (the table's form says so on standard error).
    @Test func servicesListAsJSON() throws {
        let fx = try MountFixture()
        try fx.seed("project/src/file.txt")
        let echo = try provider("org.example.echo", fx.path("project"), label: "echo")
        defer { withExtendedLifetime(echo) {} }
        let deep = fx.path("project/src/file.txt")
        #expect(eventually { (try? services(deep)) == ["org.example.echo"] })
        let listed = try run(binary, ["services", "--json", deep])
        let object = try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [String: Any]
        let entries = object?["services"] as? [[String: Any]]
        #expect(
            listed.status == 0 && object?["path"] as? String == deep && entries?.count == 1
                && entries?.first?["name"] as? String == "org.example.echo"
                && entries?.first?["path"] as? String == fx.path("project")
                && entries?.first?["pid"] as? Int == Int(echo.pid), "\(listed)")
        try fx.seed("elsewhere.txt")
        let none = try run(binary, ["services", "-J", fx.path("elsewhere.txt")])
        #expect(
            none.status == 0 && none.output == "{\"path\":\"\(fx.path("elsewhere.txt"))\",\"services\":[]}\n", "\(none)"
        )
        let both = try run(binary, ["services", "--json", deep, "--connect", "org.example.echo"])
        #expect(
            both.status == 64 && both.errors.contains("--json lists services; it does not go with --connect"), "\(both)"
        )
    }

    /// As inetd: the command's standard input and output are the connected socket itself, and
    /// it gets no other descriptor of the provider's. A name vended twice for one item by one
    /// user is refused, naming the first.
    @Test func eachConnectionRunsItsCommandOnTheSocketAloneAndANameIsVendedOnce() throws {
        let fx = try MountFixture()
        try fx.seed("project/file.txt")
        // (The listing's own descriptor is gone by the time readlink looks: an empty name.)
        let script =
            "for fd in /proc/$$/fd/*; do printf '%s ' \"${fd##*/}\"; readlink \"$fd\" | cut -d: -f1; done; read l"
        let provider = try Child(binary, ["vend", "org.example.fds", fx.path("project"), "--", "sh", "-c", script])
        defer { withExtendedLifetime(provider) {} }
        #expect(eventually { (try? services(fx.path("project"))) == ["org.example.fds"] })
        let reply = try talk(fx.path("project"), "org.example.fds", "x\\n")
        let lines = reply.output.split(separator: "\n").map(String.init)
        #expect(lines.contains("0 socket") && lines.contains("1 socket"), "\(reply)")
        #expect(
            lines.allSatisfy { $0.hasPrefix("0 ") || $0.hasPrefix("1 ") || $0.hasPrefix("2 ") || $0.hasSuffix(" ") },
            "descriptors beside 0, 1, 2: \(lines)")
        let second = try run(binary, ["vend", "org.example.fds", fx.path("project"), "--", "true"])
        #expect(
            second.status != 0 && second.errors.contains("already vended")
                && second.errors.contains("pid \(provider.pid)"), "\(second)")
    }

    /// As inetd and systemd: the command learns who connected (pid, uid, gid from the socket's
    /// credentials, command), and at most --max-connections commands run at once; a connection
    /// past them is closed at once.
    @Test func theCommandLearnsItsClientAndConnectionsAreLimited() throws {
        let fx = try MountFixture()
        try fx.seed("project/file.txt")
        let script =
            #"echo "$COORDFS_CLIENT_UID $COORDFS_CLIENT_GID $COORDFS_CLIENT_COMMAND $COORDFS_CLIENT_PID"; read l; echo "served $l""#
        let provider = try Child(
            binary, ["vend", "--max-connections", "1", "org.example.who", fx.path("project"), "--", "sh", "-c", script])
        defer { withExtendedLifetime(provider) {} }
        #expect(eventually { (try? services(fx.path("project"))) == ["org.example.who"] })
        // The first client stays connected: its command waits for a line.
        let first = try Child(binary, ["services", fx.path("project"), "--connect", "org.example.who"])
        let hello = first.next()?.split(separator: " ").map(String.init) ?? []
        #expect(
            hello.count == 4 && hello[0] == String(getuid()) && hello[1] == String(getgid()) && hello[2] == "coordfs"
                && hello[3] == String(first.pid), "\(hello)")
        // A second while it runs: closed at once, nothing served.
        let refused = try talk(fx.path("project"), "org.example.who", "x\\n")
        #expect(!refused.output.contains("served"), "\(refused)")
        first.send("one")
        #expect(first.next() == "served one")
        first.closeInput()
        #expect(first.waitForExit() != nil)
        // Its command done, the next is served.
        #expect(
            eventually {
                (try? talk(fx.path("project"), "org.example.who", "two\\n").output.contains("served two")) == true
            })
        #expect(
            try run(binary, ["vend", "--max-connections", "0", "org.example.x", fx.path("project"), "--", "true"])
                .status == 64)
    }

    /// As `nc -U`: a provider that answers and closes before it reads what it was sent resets
    /// the connection (ECONNRESET). The client prints the answer and ends with status 0, every
    /// time (it trapped in Foundation's availableData in 8 runs of 10: SIGILL), input that goes
    /// on past the provider's end raises no SIGPIPE, and a real failure is one line and status 1.
    @Test func aProviderThatAnswersAndClosesFirstEndsTheClientCleanly() throws {
        let fx = try MountFixture()
        try fx.seed("svc/file.txt")
        let provider = try Child(binary, ["vend", "org.example.bye", fx.path("svc"), "--", "echo", "bye"])
        defer { withExtendedLifetime(provider) {} }
        #expect(eventually { (try? services(fx.path("svc"))) == ["org.example.bye"] })
        for _ in 0..<10 {
            let reply = try talk(fx.path("svc"), "org.example.bye", "hi\\n")
            #expect(reply.status == 0 && reply.output == "bye\n" && reply.errors.isEmpty, "\(reply)")
        }
        let endless = try run(
            "/bin/sh", ["-c", "yes | '\(binary)' services '\(fx.path("svc"))' --connect org.example.bye"])
        #expect(endless.status == 0 && endless.output == "bye\n", "\(endless)")
        let full = try run(
            "/bin/sh",
            ["-c", "echo hi | '\(binary)' services '\(fx.path("svc"))' --connect org.example.bye > /dev/full"])
        #expect(
            full.status == 1 && full.errors == "Error: cannot write standard output: No space left on device\n",
            "\(full)")
    }

    @Test func aNearerRegistrationWinsAndAMoveKeepsTheServices() throws {
        let fx = try MountFixture()
        try fx.seed("project/sub/file.txt")
        let outer = try provider("org.example.svc", fx.path("project"), label: "outer")
        let inner = try provider("org.example.svc", fx.path("project/sub"), label: "inner")
        defer { withExtendedLifetime((outer, inner)) {} }
        try fx.seed("project/top.txt")
        #expect(eventually { (try? services(fx.path("project/sub/file.txt"))) == ["org.example.svc"] })
        #expect(
            eventually {
                (try? talk(fx.path("project/sub/file.txt"), "org.example.svc", "a\\n").output) == "inner: a\n"
            })
        #expect(try talk(fx.path("project/top.txt"), "org.example.svc", "b\\n").output == "outer: b\n")
        #expect(try run("/bin/mv", [fx.path("project"), fx.path("renamed")]).status == 0)
        #expect(try talk(fx.path("renamed/sub/file.txt"), "org.example.svc", "c\\n").output == "inner: c\n")
        #expect(try talk(fx.path("renamed/top.txt"), "org.example.svc", "d\\n").output == "outer: d\n")
    }

    /// The provider's death removes its services; a client already connected stays with the
    /// command serving it (as under inetd) until it ends the connection.
    @Test func theProvidersDeathRemovesItsServicesAndItsConnectionsStayWithTheirCommands() throws {
        let fx = try MountFixture()
        try fx.seed("project/file.txt")
        let provider = try provider("org.example.svc", fx.path("project"), label: "p")
        #expect(eventually { (try? services(fx.path("project/file.txt"))) == ["org.example.svc"] })
        // A client that stays connected.
        let client = try Child(binary, ["services", fx.path("project/file.txt"), "--connect", "org.example.svc"])
        client.send("first")
        #expect(client.next() == "p: first")
        provider.signal(SIGKILL)
        #expect(eventually { (try? services(fx.path("project/file.txt")))?.isEmpty == true })
        client.send("second")
        #expect(client.next() == "p: second", "served by its command still")
        client.closeInput()
        #expect(
            client.waitForExit(timeout: .seconds(5)) == 0, "the command ends at end-of-file, and the client with it")
    }

    @Test func deletingTheItemEndsItsServices() throws {
        let fx = try MountFixture()
        try fx.seed("gone/file.txt")
        try fx.seed("kept.txt")
        let provider = try provider("org.example.svc", fx.path("gone"), label: "p")
        defer { withExtendedLifetime(provider) {} }
        #expect(eventually { (try? services(fx.path("gone/file.txt"))) == ["org.example.svc"] })
        #expect(try run("/bin/rm", ["-r", fx.path("gone")]).status == 0)
        try FileManager.default.createDirectory(atPath: fx.path("gone"), withIntermediateDirectories: true)
        #expect(try services(fx.path("gone")).isEmpty, "a new item at the path has no services")
    }

    @Test func badRegistrationsGetClearErrors() throws {
        let fx = try MountFixture()
        try fx.seed("dir/file.txt")
        let cases: [([String], String)] = [
            (["vend", "", fx.path("dir"), "--", "cat"], "empty"),
            (["vend", String(repeating: "n", count: 256), fx.path("dir"), "--", "cat"], "at most 255"),
            (["vend", "org.example.x", fx.path("missing"), "--", "cat"], "no item"),
            (["vend", "org.example.x", "/etc", "--socket", try socketPath(fx), "--", "cat"], "not inside the mount"),
            (["vend", "org.example.x", fx.path("dir")], "command")
        ]
        for (arguments, message) in cases {
            let result = try run(binary, arguments)
            #expect(result.status != 0 && result.errors.contains(message), "\(arguments.prefix(2)): \(result.errors)")
        }
    }

    @Test func theSwiftAPIVendsAndConnectsThroughTheMount() throws {
        let fx = try MountFixture()
        try fx.seed("project/deep/file.txt")
        // This process provides, through FileProviderServices; another process connects.
        let registration = try FileProviderServices.vend(
            named: "org.example.swift", forItemAt: URL(fileURLWithPath: fx.path("project"))
        ) { connection, item in
            while case let data = connection.availableData, !data.isEmpty {
                connection.write(Data("swift saw \(item.lastPathComponent): ".utf8) + data)
            }
        }
        defer { registration.withdraw() }
        let reply = try talk(fx.path("project/deep/file.txt"), "org.example.swift", "hi\\n")
        #expect(reply.output == "swift saw file.txt: hi\n", "\(reply.errors)")
        // Another process provides; this process finds and connects through the Swift API.
        let other = try provider("org.example.cli", fx.path("project"), label: "cli")
        defer { withExtendedLifetime(other) {} }
        let deep = URL(fileURLWithPath: fx.path("project/deep/file.txt"))
        #expect(
            eventually {
                (try? FileProviderServices.services(forItemAt: deep).keys.sorted()) == [
                    "org.example.cli", "org.example.swift"
                ]
            })
        let connection = try FileProviderServices.service(named: "org.example.cli", forItemAt: deep).connection()
        connection.write(Data("ping\n".utf8))
        var received = Data()
        while !received.contains(UInt8(ascii: "\n")), case let chunk = connection.availableData, !chunk.isEmpty {
            received += chunk
        }
        #expect(String(decoding: received, as: UTF8.self) == "cli: ping\n")
        #expect(throws: FileCoordinationError.noSuchService("org.example.none")) {
            try FileProviderServices.service(named: "org.example.none", forItemAt: deep)
        }
    }

    @Test func onlyReadersSeeOrConnectAndOnlyReadersVend() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("open/file.txt")
        try fx.seed("private/file.txt")
        chmod(fx.backingPath("open"), 0o755)
        chmod(fx.backingPath("private"), 0o700)
        let open = try provider("org.example.svc", fx.path("open"), label: "o")
        let closed = try provider("org.example.svc", fx.path("private"), label: "p")
        defer { withExtendedLifetime((open, closed)) {} }
        #expect(eventually { (try? services(fx.path("private/file.txt"))) == ["org.example.svc"] })
        let script = """
            import os, socket, sys, json
            root = sys.argv[1]
            address = os.getxattr(root, "user.coordfs.socket").decode()
            os.setgroups([]); os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX); s.connect(address); f = s.makefile("rwb", buffering=0)
            def ask(message):
                f.write(json.dumps(message).encode() + b"\\n"); return json.loads(f.readline())
            ask({"op": "hello", "id": 1, "version": 1})
            print([entry["name"] for entry in ask({"op": "services", "id": 2, "path": root + "/open/file.txt"})["services"]])
            print(ask({"op": "services", "id": 3, "path": root + "/private/file.txt"}).get("error"))
            print(ask({"op": "connect", "id": 4, "name": "org.example.svc", "path": root + "/private/file.txt"}).get("error"))
            print(ask({"op": "vend", "id": 5, "name": "org.example.mine", "path": root + "/private"}).get("error"))
            print(ask({"op": "vend", "id": 6, "name": "org.example.mine", "path": root + "/open"}).get("ok"))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path])
        #expect(
            result.output.split(separator: "\n") == ["['org.example.svc']", "EACCES", "EACCES", "EACCES", "True"],
            "\(result.output) \(result.errors)")
    }

    /// Another user vending root's service name nearer the item captures nothing: root is
    /// still connected to its own provider, and the other user to its own.
    @Test func anotherUsersNearerServiceNeverCapturesAClient() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("backups/home/file.txt")
        chmod(fx.backingPath("backups"), 0o755)
        chmod(fx.backingPath("backups/home"), 0o777)
        let roots = try provider("backup", fx.path("backups"), label: "root's")
        let theirs = try Child(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", binary, "vend", "backup",
                fx.path("backups/home"), "--", "sh", "-c", "while read l; do echo \"nobody's: $l\"; done"
            ])
        defer { withExtendedLifetime((roots, theirs)) {} }
        let item = fx.path("backups/home/file.txt")
        func asNobody() -> String? {
            try? run(
                "/usr/bin/setpriv",
                [
                    "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c",
                    "printf 'y\\n' | \(binary) services '\(item)' --connect backup"
                ]
            ).output
        }
        // Once the other user's registration is in, it serves that user (the nearer one)...
        #expect(eventually { asNobody() == "nobody's: y\n" })
        // ...and root still reaches its own provider: a nearer service of another user is not one it trusts.
        let reply = try talk(item, "backup", "x\\n")
        #expect(reply.output == "root's: x\n", "root was captured: \(reply)")
    }

    func socketPath(_ fx: MountFixture) throws -> String {
        try run(
            "/usr/bin/python3",
            ["-c", "import os,sys; print(os.getxattr(sys.argv[1], 'user.coordfs.socket').decode())", fx.mountPoint.path]
        )
        .output.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
