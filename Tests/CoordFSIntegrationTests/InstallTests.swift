import Foundation
import Testing

/// `make install` with DESTDIR puts the command, the mount helper, the man pages, the
/// completions and the daemon's systemd user units under DESTDIR alone (`install-files`, from the debug build and the pages
/// `make test` generates first), and each page renders.
@Suite struct InstallTests {
    @Test func installPutsEverythingUnderDestdirAndEveryPageRenders() throws {
        let manPages = Paths.repository.appendingPathComponent(".build/man")
        try #require(
            FileManager.default.fileExists(atPath: manPages.appendingPathComponent("coordfs.1").path),
            "no man pages in .build/man: `make man` makes them (make test does)")
        let destination = URL(fileURLWithPath: "/tmp/coordfs-install-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: destination) }
        let outside = ["/usr/local/bin/coordfs", "/sbin/mount.coordfs", "/usr/local/share/man/man1/coordfs.1"]
        func modified(_ path: String) -> Date? {
            try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date
        }
        let before = outside.map(modified)
        let installed = try run(
            "/usr/bin/make",
            [
                "-C", Paths.repository.path, "--no-print-directory", "install-files",
                "DESTDIR=\(destination.path)", "BINARY=\(Paths.binary.path)"
            ])
        #expect(installed.status == 0, "\(installed)")
        #expect(outside.map(modified) == before, "make install wrote outside DESTDIR")
        let root = destination.path
        #expect(FileManager.default.isExecutableFile(atPath: root + "/usr/local/bin/coordfs"))
        #expect(
            (try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/sbin/mount.coordfs"))
                == "/usr/local/bin/coordfs")
        let bash = try String(
            contentsOfFile: root + "/usr/local/share/bash-completion/completions/coordfs", encoding: .utf8)
        #expect(bash.contains("coordfs") && bash.contains("complete"))
        // In a fresh bash with the installed script sourced (as bash-completion loads it), the
        // installed command completes a path: `coordfs watch /tm<TAB>`.
        let fresh = """
            export PATH="$1/usr/local/bin:$PATH"
            source "$1/usr/local/share/bash-completion/completions/coordfs"
            complete -p coordfs
            COMP_WORDS=(coordfs watch /tm); COMP_CWORD=2; COMP_LINE="coordfs watch /tm"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
            _coordfs coordfs /tm watch
            printf 'offered %s\\n' "${COMPREPLY[@]}"
            """
        let completed = try run(
            "/usr/bin/env",
            [
                "-i", "HOME=/tmp", "PATH=/usr/bin:/bin", "/bin/bash", "--norc", "--noprofile", "-c", fresh,
                "bash", root
            ])
        #expect(completed.status == 0 && completed.output.contains("-F _coordfs coordfs"), "\(completed)")
        #expect(completed.output.contains("offered /tmp"), "\(completed)")
        #expect(FileManager.default.fileExists(atPath: root + "/usr/local/share/zsh/site-functions/_coordfs"))
        #expect(
            FileManager.default.fileExists(atPath: root + "/usr/local/share/fish/vendor_completions.d/coordfs.fish"))
        for unit in ["coordfs-daemon.socket", "coordfs-daemon.service"] {
            #expect(
                FileManager.default.fileExists(atPath: root + "/usr/local/lib/systemd/user/" + unit),
                "\(unit) not installed")
        }
        let service = try String(
            contentsOfFile: root + "/usr/local/lib/systemd/user/coordfs-daemon.service", encoding: .utf8)
        #expect(service.contains("ExecStart=/usr/local/bin/coordfs daemon"))
        var pages: [String] = []
        for section in ["man1", "man8"] {
            let folder = root + "/usr/local/share/man/" + section
            pages += (try FileManager.default.contentsOfDirectory(atPath: folder)).map { folder + "/" + $0 }
        }
        for expected in [
            "coordfs.1", "coordfs.mount.1", "coordfs.watch.1", "coordfs.status.1", "coordfs.coordinate.1",
            "mount.coordfs.8"
        ] {
            #expect(pages.contains { $0.hasSuffix("/" + expected) }, "\(expected) not installed: \(pages)")
        }
        #expect(!pages.contains { $0.contains("daemon-start") }, "an internal subcommand has a page")
        let main = try String(contentsOfFile: root + "/usr/local/share/man/man1/coordfs.1", encoding: .utf8)
        #expect(!main.contains("daemon-start"), "coordfs(1) names an internal subcommand")
        for page in pages {
            let rendered = try run(
                "/usr/bin/man", ["-l", page], environment: ["MANPAGER": "cat", "PATH": "/usr/bin:/bin", "TERM": "dumb"])
            #expect(rendered.status == 0 && rendered.output.count > 200, "\(page): \(rendered.errors)")
            // Each page states its exit statuses: generate-manual's own section says only "0 on
            // success, >0 if an error occurs", so each command's description says which.
            // (Not argument-parser's own `help` subcommand.)
            guard !page.hasSuffix("coordfs.help.1") else { continue }
            let source = try String(contentsOfFile: page, encoding: .utf8).split(whereSeparator: \.isWhitespace).joined(
                separator: " ")
            #expect(
                source.contains("Exit status") || source.contains(".SH EXIT STATUS"), "\(page) states no exit status")
        }
    }
}
