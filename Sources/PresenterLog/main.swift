// An Apple-style presenter that says what it is asked and told: it presents PATH (a file or a
// directory) with a FilePresenter and prints each message as one JSON line, until SIGTERM or
// SIGINT. The cluster tests run it on one host while programs on another change the item.
//
//     PresenterLog PATH
//
// Lines: {"ready":true} once registered, then {"message":NAME} with "url" (and "to" for a
// move) and who made the access: "via" (mount, coordinator, outside, cluster), "pid",
// "command", "host". Asked-before messages are answered at once; a relinquished item is taken
// back when the access ends ("reacquire").
import FileCoordination
import Foundation

// @unchecked Sendable: `url` is behind its lock; its messages run on its queue.
final class LoggingPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemOperationQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    private let lock = NSLock()
    private var url: URL

    init(url: URL) { self.url = url }

    var presentedItemURL: URL? { lock.withLock { url } }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        say("relinquishToReader")
        reader { say("reacquire") }
    }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        say("relinquishToWriter")
        writer { say("reacquire") }
    }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        say("save")
        completionHandler(nil)
    }

    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        say("accommodateDeletion", presentedItemURL)
        completionHandler(nil)
    }

    func presentedItemDidMove(to newURL: URL) {
        say("didMove", newURL)
        lock.withLock { url = newURL }
    }

    func presentedItemDidChange() { say("didChange", presentedItemURL) }

    func presentedSubitemDidAppear(at url: URL) { say("subitemDidAppear", url) }

    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { say("subitemDidMove", oldURL, to: newURL) }

    func presentedSubitemDidChange(at url: URL) { say("subitemDidChange", url) }

    func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable (Error?) -> Void) {
        say("accommodateSubitemDeletion", url)
        completionHandler(nil)
    }
}

/// One JSON line on standard output, written whole.
func say(_ message: String, _ url: URL? = nil, to destination: URL? = nil) {
    var line: [String: Any] = ["message": message]
    if let url { line["url"] = url.path }
    if let destination { line["to"] = destination.path }
    if let origin = AccessOrigin.current {
        line["via"] = origin.via.rawValue
        if let pid = origin.pid { line["pid"] = Int(pid) }
        if let command = origin.command { line["command"] = command }
        if let host = origin.host { line["host"] = host }
    }
    guard let data = try? JSONSerialization.data(withJSONObject: line, options: [.sortedKeys]) else { return }
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

let arguments = CommandLine.arguments
guard arguments.count == 2 else {
    FileHandle.standardError.write(Data("usage: PresenterLog PATH\n".utf8))
    exit(2)
}
let presenter = LoggingPresenter(url: URL(fileURLWithPath: arguments[1]))
FileCoordinator.addFilePresenter(presenter)
FileHandle.standardOutput.write(Data("{\"ready\":true}\n".utf8))

// Ends on a signal: the presenter is removed first, so that nobody waits for it.
var sources: [DispatchSourceSignal] = []
for signalNumber in [SIGTERM, SIGINT] {
    signal(signalNumber, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .main)
    source.setEventHandler {
        FileCoordinator.removeFilePresenter(presenter)
        exit(0)
    }
    source.resume()
    sources.append(source)
}
dispatchMain()
