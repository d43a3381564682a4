@testable import CoordinationRuntime
import Coordination
import Foundation
import Synchronization
import Testing

/// A host's items of a store shared with other hosts: which item an access needs a delegation
/// of, and what the other hosts' presenters standing in here hear of this host's programs —
/// the edge of the store drawn as the daemon, which serves the whole host, meets it.
@Suite struct SharedStoreTests {
    static let root = ItemPath(canonical: "/srv/shared")

    static func store() -> SharedStore {
        SharedStore(domain: CoordinationDomain(), root: root, isDirectory: { _ in false }) { path, isDirectory in
            AccessTarget(path: path, isDirectory: isDirectory)
        }
    }

    static func target(_ path: String, packages: [String] = []) -> AccessTarget {
        AccessTarget(
            path: ItemPath(canonical: path), isDirectory: false,
            enclosingPackages: packages.map { ItemPath(canonical: $0) })
    }

    @Test func anAccessNeedsTheItemItLocksInsideTheStore() {
        let store = Self.store()
        #expect(store.lockedStorePath(Self.target("/srv/shared/a/b")) == "a/b")
        #expect(store.lockedStorePath(Self.target("/srv/shared")) == "")
        #expect(store.lockedStorePath(Self.target("/srv/other")) == nil, "beside the store: nothing")
        #expect(store.lockedStorePath(Self.target("/srv")) == "", "a directory around the store takes all of it")
        #expect(store.lockedStorePath(Self.target("/")) == "")
        // Its outermost package inside the store; one around the store is not the store's.
        #expect(
            store.lockedStorePath(Self.target("/srv/shared/doc.pages/data", packages: ["/srv/shared/doc.pages"]))
                == "doc.pages")
        #expect(store.lockedStorePath(Self.target("/srv/shared/a", packages: ["/srv"])) == "a")
    }

    /// What an access of `kind` to `target` needs a delegation of, and how.
    static func need(_ store: SharedStore, _ kind: AccessKind, _ target: AccessTarget) -> (String, DelegatedAccess)? {
        store.delegationNeed(kind, of: target).map { ($0.path, $0.access) }
    }

    /// Deleting, moving or replacing an item inside a package is a write of the package (P22);
    /// of the package itself, or of a plain directory's item, it is what it is.
    @Test func anItemInsideAPackageIsWrittenNotDeleted() {
        let store = Self.store()
        let inside = Self.target("/srv/shared/doc.pages/data", packages: ["/srv/shared/doc.pages"])
        #expect(Self.need(store, .writing(.forDeleting), inside)! == ("doc.pages", .writing))
        #expect(Self.need(store, .writing(.forMoving), inside)! == ("doc.pages", .writing))
        #expect(Self.need(store, .reading([]), inside)! == ("doc.pages", .reading))
        #expect(
            Self.need(store, .writing(.forDeleting), Self.target("/srv/shared/doc.pages"))! == ("doc.pages", .deleting))
        #expect(Self.need(store, .writing(.forReplacing), Self.target("/srv/shared/a/b"))! == ("a/b", .replacing))
        #expect(Self.need(store, .writing(.forMoving), Self.target("/srv"))! == ("", .moving), "the store itself moves")
        #expect(Self.need(store, .writing(.forDeleting), Self.target("/srv/other")) == nil)
    }

    /// Writers that share an item (appending, in place) need delegations that share it, and
    /// carry their kind to the hosts they recall; inside a package any write is a write of it.
    @Test func writersThatShareAnItemNeedDelegationsThatShareIt() {
        let store = Self.store()
        let log = Self.target("/srv/shared/log")
        #expect(Self.need(store, .writing(.appendingOnly), log)! == ("log", .appending))
        #expect(Self.need(store, .writing(.sharingWriters), log)! == ("log", .writingInPlace))
        #expect(Self.need(store, .writing([.sharingWriters, .passesOpenReads]), log)! == ("log", .writingInPlace))
        #expect(Self.need(store, .writing([]), log)! == ("log", .writing))
        let inside = Self.target("/srv/shared/doc.pages/data", packages: ["/srv/shared/doc.pages"])
        let package = store.delegationNeed(.writing(.appendingOnly), of: inside)
        #expect(package?.access == .writing && package?.kind == .writing([]), "\(String(describing: package))")
        let read = store.delegationNeed(.reading(.throughOpenFile), of: log)
        #expect(read?.kind == .reading(.throughOpenFile) && read?.asksPresenters == true)
        #expect(store.delegationNeed(.reading(.immediatelyAvailableMetadataOnly), of: log)?.asksPresenters == false)
        let requests: [HostRequest] = [
            HostRequest(kind: .reading(.throughOpenFile), byProgram: true),
            HostRequest(kind: .writing(.appendingOnly), byProgram: true),
            HostRequest(kind: .writing([.forMoving, .passesAppends]), byProgram: false)
        ]
        for request in requests {
            #expect(HostRequest(text: request.text) == request, "\(request.text)")
        }
        #expect(HostRequest(text: "w10000/p")?.byProgram == true && HostRequest(text: "r0")?.byProgram == false)
        #expect(HostRequest(text: "w3") == nil, "two options: no write asks so")
        #expect(HostRequest(text: "") == nil && HostRequest(text: "x1") == nil && HostRequest(text: "/p") == nil)
    }

    /// A move across the store's edge is, to the other hosts, an item that appeared or went.
    @Test func movesAcrossTheStoresEdgeAreAppearancesAndDeletions() {
        let store = Self.store()
        let heard = Mutex<[HostChange]>([])
        let presenter = store.standIn(forPresenterOf: "B", at: "dir") { change in heard.withLock { $0.append(change) } }
        defer { store.withdraw(presenter) }
        let origin = AccessOrigin(via: .mount, pid: 1)
        func told(_ notification: PresenterNotification) {
            presenter.told([notification], origin: origin, presentsPackage: false) {}
        }
        told(
            .subitemDidMove(
                from: ItemPath(canonical: "/srv/shared/dir/a"), to: ItemPath(canonical: "/srv/shared/dir/b")))
        told(.subitemDidMove(from: ItemPath(canonical: "/srv/shared/dir/b"), to: ItemPath(canonical: "/home/me/b")))
        told(.subitemDidMove(from: ItemPath(canonical: "/tmp/c"), to: ItemPath(canonical: "/srv/shared/dir/c")))
        told(.subitemDidAppear(ItemPath(canonical: "/srv/shared/dir/d")))
        told(.didMove(to: ItemPath(canonical: "/home/me/dir")))
        // Outside the store now: nothing more of it is the other hosts' business.
        told(.didChange)
        #expect(
            heard.withLock { $0 } == [
                .moved("dir/a", to: "dir/b"), .deleted("dir/b"), .appeared("dir/c"), .appeared("dir/d"),
                .deleted("dir")
            ])
    }

    /// What other hosts did, told back here, is not forwarded to them again.
    @Test func changesFromOtherHostsAreNotSentBack() {
        let store = Self.store()
        let heard = Mutex<[HostChange]>([])
        let presenter = store.standIn(forPresenterOf: "B", at: "file") { change in heard.withLock { $0.append(change) }
        }
        defer { store.withdraw(presenter) }
        for via in [AccessOrigin.Route.cluster, .outside] {
            presenter.told([.didChange], origin: AccessOrigin(via: via), presentsPackage: false) {}
        }
        #expect(heard.withLock { $0 }.isEmpty)
    }

    // MARK: Another host's accesses, met as this host's own programs' are

    /// A presenter of this host that answers each request at once, with an errno or not, and
    /// keeps what it heard.
    final class Answering: Presenter, Sendable {
        let path: ItemPath
        let refusal: Int32?
        private let log = Mutex<[PresenterRequest]>([])

        init(_ path: String, refusing refusal: Int32? = nil) {
            self.path = ItemPath(canonical: path)
            self.refusal = refusal
        }

        var heard: [PresenterRequest] { log.withLock { $0 } }
        var owner: CoordinatorIdentity { .object(7) }
        var answeredRequests: PresenterRequest.Kinds { .all }

        func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) { (path, nil) }

        func asked(
            _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
            completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
        ) {
            log.withLock { $0.append(request) }
            completion(refusal.map { POSIXError(POSIXErrorCode(rawValue: $0)!) as Error }, nil)
        }

        func told(
            _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
            moved: @escaping @Sendable () -> Void
        ) {}

        func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }
    }

    /// What the store's hook saw of the waits it was to watch, and how many it stopped watching.
    final class Watches: Sendable {
        let seen = Mutex<[(access: CoordinatedAccess, path: String)]>([])
        let stopped = Atomic<Int>(0)
    }

    static func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<200 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    static let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)

    /// Another host's request meets this host's holders with its own kind and options, as a
    /// program's here would: a reader and an appender share with an appender, a write that
    /// truncates waits for it.
    @Test func anotherHostsAccessSharesWhatAProgramHereWouldShare() async throws {
        let store = Self.store()
        let log = Self.target("/srv/shared/log")
        let appender = try #require(
            Claim.grantedAtOnce(
                in: store.domain, identity: .process(100), intents: [Intent(.writing(.appendingOnly), log)]))
        let reader = store.beginAccess(forHost: "B", "log", .reading(.throughOpenFile), asksPresenters: false)
        #expect(reader.answer == .granted, "a reader shares with an appender")
        let appending = store.beginAccess(forHost: "B", "log", .writing(.appendingOnly))
        #expect(appending.answer == .granted, "and so does another appender")
        let truncating = store.beginAccess(forHost: "C", "log", .writing([]))
        #expect(truncating.answer == .waiting, "a write that truncates waits for the appender")
        appender.end(outcome: Self.unchanged, in: store.domain)
        reader.end()
        appending.end()
        #expect(await Self.eventually { truncating.answer == .granted })
        truncating.end()
        #expect(store.heldItems().isEmpty, "other hosts' accesses are not this host's holders")
    }

    /// How many times an observer was told.
    final class Told: Sendable {
        let count = Atomic<Int>(0)
    }

    /// Another host's access waiting here for a program's write tells its observer once it is
    /// granted: the recall that began it gives the delegation back then, without looking
    /// again every few milliseconds (`HostAccess.observeAnswer`).
    @Test func anotherHostsAccessTellsWhenItIsGranted() async throws {
        let store = Self.store()
        let doc = Self.target("/srv/shared/doc")
        let writer = try #require(
            Claim.grantedAtOnce(in: store.domain, identity: .process(100), intents: [Intent(.writing([]), doc)]))
        let access = store.beginAccess(forHost: "B", "doc", .writing([]))
        #expect(access.answer == .waiting, "it waits for the program's write")
        let told = Told()
        access.observeAnswer { _ = told.count.add(1, ordering: .relaxed) }
        writer.end(outcome: Self.unchanged, in: store.domain)
        #expect(await Self.eventually { told.count.load(ordering: .relaxed) == 1 })
        #expect(access.answer == .granted)
        access.end()
        #expect(told.count.load(ordering: .relaxed) == 1, "its end is not an answer")
    }

    /// A program's read from another host waits for a writer in place here, watched as a
    /// program's read here is (the settle rule); let through by the watch, it has gone past
    /// holding nothing, and the writer still holds.
    @Test func anotherHostsReaderLetPastASettledWriterHasPassed() async throws {
        let watches = Watches()
        let store = SharedStore(
            domain: CoordinationDomain(), root: Self.root, isDirectory: { _ in false },
            target: { path, isDirectory in AccessTarget(path: path, isDirectory: isDirectory) },
            watchesWaits: { access, path in
                watches.seen.withLock { $0.append((access, path)) }
                return { _ = watches.stopped.add(1, ordering: .relaxed) }
            })
        let db = Self.target("/srv/shared/db")
        let writer = try #require(
            Claim.grantedAtOnce(
                in: store.domain, identity: .process(100), intents: [Intent(.writing(.sharingWriters), db)]))
        // A coordinated hold's read is not watched: it waits for the writer, as a hold here does.
        let hold = store.beginAccess(forHost: "B", "db", .reading([]), asksPresenters: false)
        #expect(hold.answer == .waiting && watches.seen.withLock { $0.isEmpty })
        hold.end()
        let reader = store.beginAccess(
            forHost: "B", "db", .reading(.throughOpenFile), byProgram: true, asksPresenters: false)
        #expect(reader.answer == .waiting, "a reader waits for a writer in place")
        let watched = try #require(watches.seen.withLock { $0.first })
        #expect(watched.path == "db")
        watched.access.breakThrough()  // what the settle rule does once the file has stayed unchanged
        #expect(await Self.eventually { reader.answer == .passed })
        #expect(watches.stopped.load(ordering: .relaxed) == 1, "watched no longer")
        #expect(store.heldItems().map(\.path) == ["db"], "the writer was not broken")
        reader.end()
        writer.end(outcome: Self.unchanged, in: store.domain)
    }

    /// A presenter here that refuses another host's write refuses it as it refuses a program's
    /// here: with its errno.
    @Test func aPresenterHereRefusesAnotherHostsWriteWithItsErrno() async throws {
        let store = Self.store()
        let presenter = Answering("/srv/shared/doc", refusing: EACCES)
        store.domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        defer { store.domain.unregister(key: ObjectIdentifier(presenter)) }
        let writer = store.beginAccess(forHost: "B", "doc", .writing(.sharingWriters))
        #expect(await Self.eventually { writer.answer == .refused(errno: EACCES) }, "\(writer.answer)")
        #expect(presenter.heard == [.relinquishToWriter])
        writer.end()
    }

    /// Another host's read asks the presenters here as a read here does (relinquish, save),
    /// whatever this host's programs hold: the question waits for no holder.
    @Test func anotherHostsQuestionAsksThePresentersHereAsAReadDoes() async throws {
        let store = Self.store()
        let doc = Self.target("/srv/shared/doc")
        let writer = try #require(
            Claim.grantedAtOnce(in: store.domain, identity: .process(100), intents: [Intent(.writing([]), doc)]))
        let presenter = Answering("/srv/shared/doc")
        store.domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        defer { store.domain.unregister(key: ObjectIdentifier(presenter)) }
        let question = store.askPresenters(forHost: "B", "doc", .reading(.throughOpenFile))
        #expect(await Self.eventually { question.answer == .granted }, "\(question.answer)")
        #expect(Set(presenter.heard) == [.relinquishToReader, .saveChanges], "\(presenter.heard)")
        question.end()
        writer.end(outcome: Self.unchanged, in: store.domain)
    }
}
