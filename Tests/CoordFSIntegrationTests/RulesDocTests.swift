import Foundation
import Testing

/// docs/rules.md lists every rule id the code, the tests and the docs cite, and nothing in the
/// repository cites a document outside it: a contributor can follow every cross-reference.
@Suite struct RulesDocTests {
    /// The repository's own text files: sources, tests, docs, notes and the README.
    static func texts() throws -> [(path: String, text: String)] {
        let root = Paths.repository
        var found: [(String, String)] = []
        for folder in ["Sources", "Tests", "docs", "notes", "clients", "Benchmarks"] {
            guard let walk = FileManager.default.enumerator(atPath: root.appendingPathComponent(folder).path) else {
                continue
            }
            for case let relative as String in walk {
                let path = folder + "/" + relative
                guard !path.hasPrefix("Tests/Fuzz"),
                    [".swift", ".md", ".c", ".h", ".py", ".sh"].contains(where: path.hasSuffix),
                    let text = try? String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
                else { continue }
                found.append((path, text))
            }
        }
        found.append(("README.md", try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)))
        return found
    }

    @Test func everyCitedRuleIsListed() throws {
        let rules = try String(contentsOf: Paths.repository.appendingPathComponent("docs/rules.md"), encoding: .utf8)
        let listed = Set(rules.matches(of: /\*\*([COPSQX][0-9]{1,2})\*\*/).map { String($0.1) })
        #expect(listed.count >= 80, "docs/rules.md lists \(listed.count) rules")
        var unlisted: [String] = []
        for (path, text) in try Self.texts() where path != "docs/rules.md" {
            for match in text.matches(of: /\b([COPSQX][0-9]{1,2})\b/) where !listed.contains(String(match.1)) {
                unlisted.append("\(path): \(match.1)")
            }
        }
        #expect(unlisted.isEmpty, "cited but not in docs/rules.md: \(unlisted.prefix(20))")
    }

    @Test func nothingCitesADocumentOutsideTheRepository() throws {
        // Spelled in pieces, so that this file does not cite them itself.
        let outside = [
            "SPEC" + " §", "SPEC" + ".md", "coordination-rules" + ".md", "apple-coordination-reference" + ".md",
            "fuse-measurements" + ".md", "beyond-one-mount" + ".md", "../" + "shared/"
        ]
        var citing: [String] = []
        for (path, text) in try Self.texts() {
            for name in outside where text.contains(name) { citing.append("\(path): \(name)") }
        }
        #expect(citing.isEmpty, "\(citing)")
    }
}
