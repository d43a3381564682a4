import Foundation
import Testing

/// docs/architecture.md's table of modules says what Package.swift declares: every library,
/// C and executable target, with its dependencies in the manifest's order.
@Suite struct ArchitectureDocTests {
    /// The targets of Package.swift (test targets and TestSupport left out): name → (kind, dependencies).
    static func manifestModules() throws -> [String: (kind: String, dependencies: [String])] {
        let manifest = try String(contentsOf: Paths.repository.appendingPathComponent("Package.swift"), encoding: .utf8)
        var modules: [String: (kind: String, dependencies: [String])] = [:]
        let kinds = [
            ".executableTarget(": "executable", ".systemLibrary(": "system library", ".testTarget(": "test",
            ".target(": "library"
        ]
        var index = manifest.startIndex
        while index < manifest.endIndex {
            guard
                let (opening, kind) = kinds.compactMap({ key, kind in
                    manifest.range(of: key, range: index..<manifest.endIndex).map { ($0, kind) }
                })
                .min(by: { $0.0.lowerBound < $1.0.lowerBound })
            else { break }
            // The call's text, up to its balanced closing parenthesis.
            var depth = 1, end = opening.upperBound
            while depth > 0 && end < manifest.endIndex {
                if manifest[end] == "(" { depth += 1 } else if manifest[end] == ")" { depth -= 1 }
                end = manifest.index(after: end)
            }
            let call = String(manifest[opening.upperBound..<end])
            index = end
            guard kind != "test", let name = Self.firstQuoted(in: call, after: "name:") else { continue }
            var dependencies: [String] = []
            if let list = call.range(of: "dependencies: [") {
                var depth = 1, cursor = list.upperBound
                while depth > 0 && cursor < call.endIndex {
                    if call[cursor] == "[" { depth += 1 } else if call[cursor] == "]" { depth -= 1 }
                    cursor = call.index(after: cursor)
                }
                let text = String(call[list.upperBound..<call.index(before: cursor)])
                // "Name" entries, and .product(name: "Name", ...) by their product's name.
                let pattern = try Regex(#"\.product\(name: "([^"]+)"[^)]*\)|"([^"]+)""#)
                for match in text.matches(of: pattern) {
                    if let product = match.output[1].substring {
                        dependencies.append(String(product))
                    } else if let plain = match.output[2].substring {
                        dependencies.append(String(plain))
                    }
                }
            }
            let isC =
                kind == "library"
                && FileManager.default.fileExists(
                    atPath: Paths.repository.appendingPathComponent("Sources/\(name)").path)
                && (try? FileManager.default.contentsOfDirectory(
                    atPath: Paths.repository.appendingPathComponent("Sources/\(name)").path))?
                    .contains { $0.hasSuffix(".c") } == true
            if name != "TestSupport" { modules[name] = (isC ? "C" : kind, dependencies) }
        }
        return modules
    }

    static func firstQuoted(in text: String, after key: String) -> String? {
        guard let keyRange = text.range(of: key),
            let open = text.range(of: "\"", range: keyRange.upperBound..<text.endIndex),
            let close = text.range(of: "\"", range: open.upperBound..<text.endIndex)
        else { return nil }
        return String(text[open.upperBound..<close.lowerBound])
    }

    /// The rows between the table's markers in docs/architecture.md.
    static func documentedModules() throws -> [String: (kind: String, dependencies: [String])] {
        let doc = try String(
            contentsOf: Paths.repository.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        guard let start = doc.range(of: "<!-- modules:"), let end = doc.range(of: "<!-- end of modules -->") else {
            return [:]
        }
        var modules: [String: (kind: String, dependencies: [String])] = [:]
        for line in doc[start.upperBound..<end.lowerBound].split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 3, cells[0] != "module", !cells[0].hasPrefix("---") else { continue }
            let dependencies =
                cells[2] == "—" ? [] : cells[2].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            modules[cells[0]] = (cells[1], dependencies)
        }
        return modules
    }

    @Test func theModuleTableIsTheManifests() throws {
        let manifest = try Self.manifestModules(), documented = try Self.documentedModules()
        #expect(manifest.count >= 10, "the manifest's targets were not found: \(manifest.keys.sorted())")
        #expect(
            Set(documented.keys) == Set(manifest.keys),
            "docs/architecture.md lists \(documented.keys.sorted()), Package.swift declares \(manifest.keys.sorted())")
        for (name, declared) in manifest {
            guard let row = documented[name] else { continue }
            #expect(row.kind == declared.kind, "\(name): documented as \(row.kind), declared as \(declared.kind)")
            #expect(
                row.dependencies == declared.dependencies,
                "\(name): documented dependencies \(row.dependencies), declared \(declared.dependencies)")
        }
    }
}
