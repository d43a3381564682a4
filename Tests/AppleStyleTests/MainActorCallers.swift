import FileCoordination
import Foundation
import Testing

/// An app's model on the main actor, coordinating with the async forms as Swift 6 code would:
/// accessors that touch the model's own state, and no `@Sendable` ceremony.
@MainActor final class DocumentModel {
    let url: URL
    private(set) var text = ""
    private(set) var saves = 0

    init(url: URL) { self.url = url }

    func load() async throws {
        text = try await FileCoordinator().read(at: url) { url in try String(contentsOf: url, encoding: .utf8) }
    }

    func save(_ new: String) async throws {
        try await FileCoordinator().write(at: url, options: .forReplacing) { url in
            try new.write(to: url, atomically: true, encoding: .utf8)
            text = new  // main-actor state: the accessor runs where its caller does
            saves += 1
        }
    }

    func copy(to other: URL) async throws {
        let from = FileAccessIntent.readingIntent(with: url),
            to = FileAccessIntent.writingIntent(with: other, options: .forReplacing)
        try await FileCoordinator().coordinate(with: [from, to]) {
            try Data(contentsOf: from.url).write(to: to.url)
            saves += 1
        }
    }
}

@Suite struct MainActorCallers {
    @Test @MainActor func aMainActorModelCoordinatesWithTheAsyncForms() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-main-actor-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let model = DocumentModel(url: directory.appendingPathComponent("doc.txt"))
        try await model.save("hello")
        try await model.load()
        #expect(model.text == "hello")
        try await model.copy(to: directory.appendingPathComponent("copy.txt"))
        #expect(try String(contentsOf: directory.appendingPathComponent("copy.txt"), encoding: .utf8) == "hello")
        #expect(model.saves == 2)
    }
}
