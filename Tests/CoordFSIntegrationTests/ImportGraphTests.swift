import Foundation
import Testing

/// Package.swift declares what each target's files import, and nothing more: a file importing a
/// module its target does not declare fails here, as does a declared module none of them
/// imports; and the layers docs/architecture.md draws side by side depend on none of each other.
/// The manifest is read from its text, strictly: a target this test cannot read fails it.
@Suite struct ImportGraphTests {
    /// A target as Package.swift declares it.
    struct Target {
        var name: String
        var kind: String
        /// Its directory, from the repository's root.
        var path: String
        /// Its targets, and its products by their names (each of ours is named as its module).
        var dependencies: [String]
    }

    struct ManifestError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// The toolchain's and the system's modules: imported anywhere, declared nowhere.
    static let systemModules: Set<String> = [
        "Swift", "_Concurrency", "_StringProcessing", "Synchronization", "Glibc", "Musl", "Darwin", "Dispatch",
        "Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationXML", "Testing", "XCTest"
    ]

    static let kinds = [
        ".target(": "library", ".executableTarget(": "executable", ".testTarget(": "test",
        ".systemLibrary(": "system library"
    ]

    /// The targets of Package.swift, in its order.
    static func manifestTargets() throws -> [Target] {
        let file = Paths.repository.appendingPathComponent("Package.swift")
        let manifest = try uncommented(String(contentsOf: file, encoding: .utf8))
        guard let call = manifest.range(of: "Package(") else {
            throw ManifestError("Package.swift calls no Package(…)")
        }
        let arguments = try elements(Array(manifest[call.upperBound...])).elements
        guard let targets = arguments.first(where: { $0.hasPrefix("targets:") }) else {
            throw ManifestError("Package(…) has no targets:")
        }
        var found: [Target] = []
        for element in try list(targets.dropFirst("targets:".count)) { found.append(try target(element)) }
        return found
    }

    /// One element of `targets:`.
    static func target(_ element: String) throws -> Target {
        guard let opening = kinds.keys.first(where: { element.hasPrefix($0) }), let kind = kinds[opening] else {
            throw ManifestError("cannot read this target of Package.swift: \(element.prefix(80))")
        }
        let (arguments, end) = try elements(Array(element.dropFirst(opening.count)))
        guard end == element.count - opening.count else {
            throw ManifestError("something follows this target of Package.swift: \(element.prefix(80))")
        }
        var labeled: [String: String] = [:]
        for argument in arguments {
            guard let colon = argument.firstIndex(of: ":") else {
                throw ManifestError("an argument without a label in \(element.prefix(80))")
            }
            let value = argument[argument.index(after: colon)...]
            labeled[String(argument[..<colon])] = value.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        guard let name = labeled["name"].flatMap(string) else {
            throw ManifestError("a target without a name: \(element.prefix(80))")
        }
        // The whole directory is the target's only without these.
        for label in ["sources", "exclude"] where labeled[label] != nil {
            throw ManifestError("\(name): this test reads a target's whole directory, and cannot take `\(label):`")
        }
        var path = (kind == "test" ? "Tests/" : "Sources/") + name
        if let given = labeled["path"] {
            guard let literal = string(given) else { throw ManifestError("\(name): its path is not a string") }
            path = literal
        }
        var dependencies: [String] = []
        if let given = labeled["dependencies"] {
            for dependency in try list(Substring(given)) {
                dependencies.append(try self.dependency(dependency, of: name))
            }
        }
        return Target(name: name, kind: kind, path: path, dependencies: dependencies)
    }

    /// The name of a dependency: "Name", .product(name: "Name", …), .target(name: "Name") or
    /// .byName(name: "Name").
    static func dependency(_ element: String, of target: String) throws -> String {
        if let name = string(element) { return name }
        for opening in [".product(", ".target(", ".byName("] where element.hasPrefix(opening) {
            let arguments = try elements(Array(element.dropFirst(opening.count))).elements
            if let first = arguments.first, first.hasPrefix("name:"),
                let name = string(first.dropFirst("name:".count).trimmingCharacters(in: .whitespaces))
            {
                return name
            }
        }
        throw ManifestError("\(target): cannot read the dependency \(element)")
    }

    /// The text of a plain string literal; nil for anything else.
    static func string(_ literal: String) -> String? {
        guard literal.count >= 2, literal.hasPrefix("\""), literal.hasSuffix("\"") else { return nil }
        let inside = literal.dropFirst().dropLast()
        return inside.contains("\"") || inside.contains("\\") ? nil : String(inside)
    }

    /// The elements of `text`, an array literal.
    static func list(_ text: Substring) throws -> [String] {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.hasPrefix("["), trimmed.hasSuffix("]") else {
            throw ManifestError("not a list: \(trimmed.prefix(80))")
        }
        let (found, end) = try elements(Array(trimmed.dropFirst()))
        guard end == trimmed.count - 1 else { throw ManifestError("something follows a list: \(trimmed.prefix(80))") }
        return found
    }

    /// The comma-separated elements of a list or an argument list, read from just after its
    /// opening bracket up to the bracket that closes it; `end`, how many characters that took.
    static func elements(_ characters: [Character]) throws -> (elements: [String], end: Int) {
        var found: [String] = [], current = "", depth = 0, inString = false, index = 0
        while index < characters.count {
            let character = characters[index]
            index += 1
            if inString {
                current.append(character)
                if character == "\\" && index < characters.count {
                    current.append(characters[index])
                    index += 1
                } else if character == "\"" {
                    inString = false
                }
            } else if character == "\"" {
                inString = true
                current.append(character)
            } else if character == "(" || character == "[" {
                depth += 1
                current.append(character)
            } else if character == ")" || character == "]" {
                if depth == 0 {
                    let last = current.trimmingCharacters(in: .whitespacesAndNewlines)
                    // After a trailing comma, nothing.
                    if !last.isEmpty { found.append(last) }
                    return (found, index)
                }
                depth -= 1
                current.append(character)
            } else if character == "," && depth == 0 {
                found.append(current.trimmingCharacters(in: .whitespacesAndNewlines))
                current = ""
            } else {
                current.append(character)
            }
        }
        throw ManifestError("Package.swift: a list or a call is not closed")
    }

    /// `text` without its line comments; a string's "//" (a URL's) is kept.
    static func uncommented(_ text: String) throws -> String {
        let characters = Array(text)
        var result = "", inString = false, index = 0
        while index < characters.count {
            let character = characters[index]
            let next: Character? = index + 1 < characters.count ? characters[index + 1] : nil
            if inString {
                result.append(character)
                if character == "\\", let next {
                    result.append(next)
                    index += 2
                    continue
                }
                if character == "\"" { inString = false }
            } else if character == "/" && next == "/" {
                while index < characters.count && characters[index] != "\n" { index += 1 }
                continue
            } else if character == "/" && next == "*" {
                throw ManifestError("Package.swift has a block comment, which this test does not read")
            } else {
                if character == "\"" { inString = true }
                result.append(character)
            }
            index += 1
        }
        return result
    }

    /// The modules the Swift files under `directory` import, each with a file that imports it,
    /// and how many Swift files there are.
    static func imports(under directory: String) throws -> (files: Int, modules: [String: String]) {
        let root = Paths.repository.appendingPathComponent(directory)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root.path, isDirectory: &isDirectory), isDirectory.boolValue,
            let walk = FileManager.default.enumerator(atPath: root.path)
        else {
            throw ManifestError("\(directory), a target's directory, is not there")
        }
        // `import M`, `@testable import M`, `package import M`, `import struct M.T`: M.
        let importLine =
            #/
            ^ (?: @\w+ (?: \( [^)]* \) )? \s+ )*
            (?: (?: public | package | internal | fileprivate | private ) \s+ )?
            import \s+ (?: (?: typealias | struct | class | enum | protocol | let | var | func ) \s+ )?
            (\w+)
            /#
        var files = 0, modules: [String: String] = [:]
        for case let relative as String in walk where relative.hasSuffix(".swift") {
            files += 1
            let text = try String(contentsOf: root.appendingPathComponent(relative), encoding: .utf8)
            var inLiteral = false
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                // The lines of a multi-line string (a test's Python, say) are not Swift.
                if line.components(separatedBy: "\"\"\"").count % 2 == 0 {
                    inLiteral.toggle()
                    continue
                }
                guard !inLiteral, let match = line.prefixMatch(of: importLine) else { continue }
                let module = String(match.1)
                if modules[module] == nil { modules[module] = directory + "/" + relative }
            }
        }
        return (files, modules)
    }

    @Test func everyTargetDeclaresWhatItsFilesImportAndNothingMore() throws {
        let targets = try Self.manifestTargets()
        #expect(targets.count >= 20, "the manifest's targets were not found: \(targets.map(\.name))")
        var wrong: [String] = []
        for target in targets {
            let (files, imported) = try Self.imports(under: target.path)
            // C, and the system library: their headers say what they include.
            if files == 0 { continue }
            let undeclared = imported.filter { module, _ in
                module != target.name && !Self.systemModules.contains(module) && !target.dependencies.contains(module)
            }
            for (module, file) in undeclared.sorted(by: { $0.key < $1.key }) {
                wrong.append("\(target.name): \(file) imports \(module), which the target does not declare")
            }
            for dependency in target.dependencies where imported[dependency] == nil {
                wrong.append("\(target.name) declares \(dependency), which none of its files imports")
            }
        }
        #expect(wrong.isEmpty, "\(wrong)")
    }

    /// The Foundation facade, the control server and the mount sit side by side on the runtime,
    /// with the cluster module beside them: none depends on another, even through a third, and
    /// the runtime on none of them. Only the commands join them.
    @Test func theLayersKnowNothingOfEachOther() throws {
        let targets = try Dictionary(Self.manifestTargets().map { ($0.name, $0) }) { first, _ in first }
        let apart = ["FileCoordination", "CoordinationServer", "CoordFSMount", "CoordinationCluster"]
        // Every module `name` depends on, directly or through others.
        func below(_ name: String) -> Set<String> {
            var seen: Set<String> = [], next = targets[name]?.dependencies ?? []
            while let module = next.popLast() {
                if seen.insert(module).inserted { next += targets[module]?.dependencies ?? [] }
            }
            return seen
        }
        for name in apart + ["CoordinationRuntime"] {
            #expect(targets[name] != nil, "Package.swift declares no \(name)")
            let under = below(name)
            for other in apart where other != name {
                #expect(!under.contains(other), "\(name) depends on \(other)")
            }
        }
    }
}
