import Foundation
import Testing

/// A file handle of an item in the mount opens it again as long as the item lives, even after
/// the kernel has dropped its inodes (drop_caches) and after the item's directory was renamed:
/// as on the backing filesystem itself. (NFS re-export and backup tools keep handles.)
@Suite(.serialized) struct FileHandleTests {
    @Test func handlesOpenAgainAfterTheKernelDroppedItsInodes() throws {
        let fx = try MountFixture()
        let script = Paths.scripts.appendingPathComponent("file_handles.py").path
        let native = try run("/usr/bin/python3", [script, fx.base.appendingPathComponent("native").path])
        let mounted = try run("/usr/bin/python3", [script, fx.path("run")])
        #expect(native.status == 0 && mounted.status == 0, "\(native.errors) \(mounted.errors)")
        #expect(native.output.split(separator: "\n").count == 9 && !native.output.contains("error"), "\(native.output)")
        #expect(mounted.output == native.output, "through the mount:\n\(mounted.output)\nnatively:\n\(native.output)")
    }
}
