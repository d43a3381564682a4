// An Apple-style program: a JSON counter file, updated under coordinated merging writes with
// atomic saves, presented by a FilePresenter, and moved away and back at the end. Two copies
// run at once must end at exactly twice their updates, each presenter hearing each of the
// other's accesses once. The tests run it in a mount, outside any mount, and beside shell loops.
//
//     CoordinatedCounter FILE UPDATES NAME PEER
//
// PEER is the other copy's NAME, or - when the other party is no copy of this program (a shell
// loop using the directory): it then neither waits for it nor for its end.
//
// It prints one JSON line: what its presenter heard, in counts and in order.
import FileCoordination
import Foundation

// @unchecked Sendable: its state is behind its lock; its messages run on its queue.
final class CounterPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemOperationQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    private let lock = NSLock()
    private var url: URL
    /// One letter a message: R relinquish, S save, C did-change, M did-move, A reacquire.
    private(set) var heard = ""

    init(url: URL) { self.url = url }

    var presentedItemURL: URL? { lock.withLock { url } }

    private func note(_ letter: Character) { lock.withLock { heard.append(letter) } }
    var log: String { lock.withLock { heard } }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("R")
        writer { self.note("A") }
    }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("r")
        reader { self.note("A") }
    }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        note("S")
        completionHandler(nil)
    }

    func presentedItemDidChange() { note("C") }

    func presentedItemDidMove(to newURL: URL) {
        note("M")
        lock.withLock { url = newURL }
    }
}

struct Count: Codable { var count: Int; var by: String }

let arguments = CommandLine.arguments
guard arguments.count == 5, let updates = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: CoordinatedCounter FILE UPDATES NAME PEER\n".utf8))
    exit(2)
}
let file = URL(fileURLWithPath: arguments[1])
let name = arguments[3], peer = arguments[4]
let directory = file.deletingLastPathComponent()
let presenter = CounterPresenter(url: file)
FileCoordinator.addFilePresenter(presenter)
let coordinator = FileCoordinator(filePresenter: presenter)
var errors: [String] = []
/// Each successful update's count and when it ended (seconds since 1970): two that wrote one
/// count are an update lost, and a soak's checker tells when.
var wrote: [[Double]] = []
/// Accesses another user's access went past (a shared mount's break time): what the accessor
/// did stands (an update's count, 0 for the move) and how long it ran, in seconds, so that a
/// soak can tell a break the mount owed from one it did not.
var broken: [[Double]] = []

// Both are ready before either writes: each presenter hears all of the other's accesses.
func marker(_ who: String, _ what: String) -> URL { directory.appendingPathComponent(".\(who).\(what)") }
func waitFor(_ url: URL) {
    if peer == "-" { return }
    let deadline = Date().addingTimeInterval(120)
    while !FileManager.default.fileExists(atPath: url.path) && Date() < deadline { usleep(10_000) }
}
_ = FileManager.default.createFile(atPath: marker(name, "ready").path, contents: nil)
waitFor(marker(peer, "ready"))

for _ in 0..<updates {
    do {
        // The item's own path, not the presenter's URL: the peer's final move takes the item away
        // and back in one access, so it is at FILE whenever an access can begin, and a hold of
        // FILE that waits for that move follows it there and back (C11). The presenter's URL,
        // read between the move's two did-move messages, names the place the item was for a
        // moment: a hold there that came after the move would write a new file beside the
        // counter, and one that came during it was granted at FILE only because it followed the
        // move back.
        var written = 0
        var began = Date()
        do {
            try coordinator.coordinate(writingItemAt: file, options: .forMerging) { url in
                began = Date()
                let old = (try? Data(contentsOf: url)).flatMap { try? JSONDecoder().decode(Count.self, from: $0) }
                let new = Count(count: (old?.count ?? 0) + 1, by: name)
                try JSONEncoder().encode(new).write(to: url, options: .atomic)
                written = new.count
            }
        } catch FileCoordinationError.coordinationBroken {
            broken.append([Double(written), Date().timeIntervalSince(began)])
            continue
        }
        wrote.append([Double(written), Date().timeIntervalSince1970])
    } catch {
        errors.append("update: \(error)")
    }
}

// The final move: away and back in one coordinated access, each step reported. (In two
// accesses, a peer whose presenter has not heard of the first yet would write a new item at
// the old place between them, as it would on Apple's systems.)
let away = directory.appendingPathComponent(file.lastPathComponent + ".\(name).moved")
var moveBegan = Date()
do {
    try coordinator.coordinate(writingItemAt: file, options: .forMoving, writingItemAt: away, options: .forReplacing) {
        source, destination in
        moveBegan = Date()
        try FileManager.default.moveItem(at: source, to: destination)
        coordinator.item(at: source, didMoveTo: destination)
        try FileManager.default.moveItem(at: destination, to: source)
        coordinator.item(at: destination, didMoveTo: source)
    }
} catch FileCoordinationError.coordinationBroken {
    broken.append([0, Date().timeIntervalSince(moveBegan)])
} catch {
    errors.append("move: \(error)")
}

_ = FileManager.default.createFile(atPath: marker(name, "done").path, contents: nil)
waitFor(marker(peer, "done"))
// What the peer's last access told is on its way: let it arrive (the log stops growing).
var last = presenter.log
repeat {
    last = presenter.log
    usleep(300_000)
} while presenter.log != last
presenter.presentedItemOperationQueue.waitUntilAllOperationsAreFinished()
FileCoordinator.removeFilePresenter(presenter)

let log = presenter.log
func count(_ letter: Character) -> Int { log.filter { $0 == letter }.count }
let report: [String: Any] = [
    "name": name, "log": log, "relinquish": count("R") + count("r"), "save": count("S"), "change": count("C"),
    "move": count("M"), "reacquire": count("A"), "errors": errors, "wrote": wrote,
    "broken": broken
]
let line = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
FileHandle.standardOutput.write(line + Data("\n".utf8))
exit(errors.isEmpty ? 0 : 1)
