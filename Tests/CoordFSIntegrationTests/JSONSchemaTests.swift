import CoordinationClient
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The JSON Schemas in docs/schemas, held to what the commands print: each output of a mount
/// with a holder, a waiter, a presenter and a service is valid under its schema, and
/// docs/json.md names each file.
@Suite struct JSONSchemas {
    let binary = Paths.binary.path

    func schema(_ name: String) throws -> SchemaCheck {
        let url = Paths.repository.appendingPathComponent("docs/schemas/\(name).json")
        let root = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any], "\(url.path)")
        #expect(root["$schema"] as? String == "https://json-schema.org/draft/2020-12/schema", "\(name).json")
        return SchemaCheck(root: root)
    }

    func objects(_ output: String) -> [Any] {
        output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) }
    }

    @Test func eachJSONOutputIsValidUnderItsSchema() throws {
        let guide = try String(contentsOf: Paths.repository.appendingPathComponent("docs/json.md"), encoding: .utf8)
        for name in ["status", "mounts", "watch", "services"] {
            #expect(guide.contains("(schemas/\(name).json)"), "docs/json.md does not name schemas/\(name).json")
        }
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        try fx.seed("watched.txt")
        let holder = try Child.holder(), waiter = try Child.holder()
        #expect(holder.ask("open w \(fx.path("doc.txt"))") == "ok 1")
        waiter.send("open r \(fx.path("doc.txt"))")
        let watcher = try Child(binary, ["watch", "--json", fx.path("watched.txt")])
        let provider = try Child(binary, ["vend", "org.example.schema", fx.mountPoint.path, "--", "cat"])
        defer { withExtendedLifetime((holder, waiter, provider)) {} }
        #expect(
            eventually {
                (try? fx.state()).map { $0.contains("WAIT") && $0.contains("PRESENT") && $0.contains("SERVICE") }
                    == true
            })

        let status = try run(binary, ["status", "--json", fx.mountPoint.path])
        let statusLines = objects(status.output)
        #expect(statusLines.count == 1, "\(status)")
        for line in statusLines {
            let problems = try schema("status").problems(line)
            #expect(problems.isEmpty, "\(problems)")
            let fields = line as? [String: Any]
            #expect(
                (fields?["services"] as? [[String: Any]])?.first?["name"] as? String == "org.example.schema",
                "\(status.output)")
        }
        let mounts = try run(binary, ["status", "--mounts", "--json"])
        #expect(
            objects(mounts.output).contains { ($0 as? [String: Any])?["target"] as? String == fx.mountPoint.path },
            "\(mounts)")
        for line in objects(mounts.output) {
            let problems = try schema("mounts").problems(line)
            #expect(problems.isEmpty, "\(problems)")
        }
        let services = try run(binary, ["services", "--json", fx.path("doc.txt")])
        let servicesLines = objects(services.output)
        #expect(servicesLines.count == 1, "\(services)")
        for line in servicesLines {
            let problems = try schema("services").problems(line)
            #expect(problems.isEmpty, "\(problems)")
        }
        #expect(try run("/bin/sh", ["-c", "echo more >> \"$1\"", "sh", fx.path("watched.txt")]).status == 0)
        let event = try #require(watcher.next(), "the watch printed nothing")
        let problems = try schema("watch").problems(JSONSerialization.jsonObject(with: Data(event.utf8)))
        #expect(problems.isEmpty, "\(event): \(problems)")
        // The checker is no rubber stamp: a line without what the schema requires fails it.
        let incomplete = try schema("status").problems(["root": "/mnt"]),
            mistyped = try schema("watch").problems(["wd": "one"])
        #expect(!incomplete.isEmpty && !mistyped.isEmpty, "\(incomplete) \(mistyped)")
    }
}

/// Just enough of JSON Schema (draft 2020-12) for docs/schemas: `type`, `const`, `enum`,
/// `minimum`, `maximum`, `pattern`, `required`, `properties`, `additionalProperties`, `items`,
/// `$ref` into `$defs`, and `dependentRequired`. What it does not know, it lets pass.
struct SchemaCheck {
    let root: [String: Any]

    /// What in `value` the schema refuses, one line each, by where it is ("$.holders[0].pid").
    func problems(_ value: Any) -> [String] { problems(value, root, at: "$") }

    private func problems(_ value: Any, _ schema: [String: Any], at path: String) -> [String] {
        if let reference = schema["$ref"] as? String {
            let name = String(reference.dropFirst("#/$defs/".count))
            guard reference.hasPrefix("#/$defs/"),
                let target = (root["$defs"] as? [String: Any])?[name] as? [String: Any]
            else {
                return ["\(path): no \(reference) in the schema"]
            }
            return problems(value, target, at: path)
        }
        if let type = schema["type"] as? String, !Self.isOf(type, value) {
            return ["\(path): not of type \(type): \(value)"]
        }
        var found: [String] = []
        if let constant = schema["const"], !Self.same(value, constant) {
            found.append("\(path): not \(constant): \(value)")
        }
        if let options = schema["enum"] as? [Any], !options.contains(where: { Self.same(value, $0) }) {
            found.append("\(path): not one of \(options): \(value)")
        }
        if let number = value as? Int {
            if let minimum = schema["minimum"] as? Int, number < minimum {
                found.append("\(path): \(number) < \(minimum)")
            }
            if let maximum = schema["maximum"] as? Int, number > maximum {
                found.append("\(path): \(number) > \(maximum)")
            }
        }
        if let text = value as? String, let pattern = schema["pattern"] as? String, let regex = try? Regex(pattern),
            (try? regex.firstMatch(in: text)) == nil
        {
            found.append("\(path): '\(text)' does not match \(pattern)")
        }
        if let object = value as? [String: Any] {
            for key in schema["required"] as? [String] ?? [] where object[key] == nil {
                found.append("\(path): no \(key)")
            }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for (key, field) in object {
                if let property = properties[key] as? [String: Any] {
                    found += problems(field, property, at: "\(path).\(key)")
                } else if let others = schema["additionalProperties"] as? [String: Any] {
                    found += problems(field, others, at: "\(path).\(key)")
                }
            }
            for (key, needed) in schema["dependentRequired"] as? [String: [String]] ?? [:] where object[key] != nil {
                for other in needed where object[other] == nil { found.append("\(path): \(key) without \(other)") }
            }
        }
        if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
            for (index, element) in array.enumerated() { found += problems(element, items, at: "\(path)[\(index)]") }
        }
        return found
    }

    private static func isOf(_ type: String, _ value: Any) -> Bool {
        switch type {
        case "string": value is String
        case "integer": value is Int
        case "boolean": value is Bool
        case "array": value is [Any]
        case "object": value is [String: Any]
        default: true
        }
    }

    private static func same(_ value: Any, _ other: Any) -> Bool {
        if let text = value as? String, let otherText = other as? String { return text == otherText }
        if let flag = value as? Bool, let otherFlag = other as? Bool { return flag == otherFlag }
        if let number = value as? Int, let otherNumber = other as? Int { return number == otherNumber }
        return false
    }
}
