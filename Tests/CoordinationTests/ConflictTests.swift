@testable import Coordination
import Testing

/// The conflict predicate, case by case.
@Suite struct ConflictTests {
    let file = ItemPath("/d/f")!
    let dir = ItemPath("/d")!

    func mode(_ kind: AccessKind, _ path: ItemPath, directory: Bool = false, packages: [ItemPath] = []) -> LockMode {
        LockMode(Intent(kind, AccessTarget(path: path, isDirectory: directory, enclosingPackages: packages)))
    }

    @Test func sameItem() {
        let read = mode(.reading([]), file), write = mode(.writing([]), file)
        let metaRead = mode(.reading(.immediatelyAvailableMetadataOnly), file)
        let metaWrite = mode(.writing(.contentIndependentMetadataOnly), file)
        let delete = mode(.writing(.forDeleting), file)
        #expect(!read.conflicts(with: read))  // C3
        #expect(read.conflicts(with: write) && write.conflicts(with: read))  // C1, C2
        #expect(write.conflicts(with: write))
        #expect(!metaRead.conflicts(with: write))  // O3
        #expect(metaRead.conflicts(with: delete))  // O3
        #expect(!metaWrite.conflicts(with: read))  // O9
        #expect(metaWrite.conflicts(with: write) && metaWrite.conflicts(with: metaWrite))
    }

    @Test func directoriesAndContents() {
        let inner = mode(.reading(.immediatelyAvailableMetadataOnly), file)
        #expect(!mode(.writing([]), dir, directory: true).conflicts(with: mode(.writing([]), file)))  // C18
        for option in [WritingOptions.forDeleting, .forMoving, .forReplacing] {
            let removal = mode(.writing(option), dir, directory: true)
            #expect(removal.conflicts(with: inner) && inner.conflicts(with: removal))  // C19
        }
        #expect(!mode(.writing(.forMerging), dir, directory: true).conflicts(with: inner))
        // Deleting a file does not cover anything beside it.
        #expect(!mode(.writing(.forDeleting), file).conflicts(with: mode(.writing([]), ItemPath("/d/g")!)))
    }

    @Test func packagesLockAsAWhole() {
        let package = ItemPath("/p.pkg")!
        let a = mode(.writing(.forDeleting), ItemPath("/p.pkg/a")!, packages: [package])
        let b = mode(.reading([]), ItemPath("/p.pkg/sub/b")!, packages: [package])
        #expect(a.path == package && !a.kind.destructive)  // P22: a write to the package
        #expect(a.conflicts(with: b))  // C17
    }
}
