@testable import CoordinationRuntime
import Coordination
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

    /// Deleting, moving or replacing an item inside a package is a write of the package (P22);
    /// of the package itself, or of a plain directory's item, it is what it is.
    @Test func anItemInsideAPackageIsWrittenNotDeleted() {
        let store = Self.store()
        let inside = Self.target("/srv/shared/doc.pages/data", packages: ["/srv/shared/doc.pages"])
        #expect(store.delegationNeed(.writing(.forDeleting), of: inside)! == ("doc.pages", .writing))
        #expect(store.delegationNeed(.writing(.forMoving), of: inside)! == ("doc.pages", .writing))
        #expect(store.delegationNeed(.reading([]), of: inside)! == ("doc.pages", .reading))
        #expect(
            store.delegationNeed(.writing(.forDeleting), of: Self.target("/srv/shared/doc.pages"))! == (
                "doc.pages", .deleting
            ))
        #expect(
            store.delegationNeed(.writing(.forReplacing), of: Self.target("/srv/shared/a/b"))! == ("a/b", .replacing))
        #expect(
            store.delegationNeed(.writing(.forMoving), of: Self.target("/srv"))! == ("", .moving),
            "the store itself moves")
        #expect(store.delegationNeed(.writing(.forDeleting), of: Self.target("/srv/other")) == nil)
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
}
