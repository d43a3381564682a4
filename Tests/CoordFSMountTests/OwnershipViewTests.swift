@testable import CoordFSMount
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `-o uid=,gid=,umask=` taken from an option list, and what they make of attributes.
@Suite struct OwnershipViewTests {
    @Test func optionsAreTakenAndTheRestLeft() throws {
        var options = ["allow_other", "uid=42", "gid=root", "umask=027", "noatime"]
        let view = try OwnershipView.take(from: &options)
        #expect(options == ["allow_other", "noatime"])
        #expect(view == OwnershipView(owner: 42, group: 0, umask: 0o027))
    }

    @Test(arguments: ["uid=nosuchuser-x", "gid=nosuchgroup-x", "umask=8", "umask=17777", "umask="])
    func aBadValueIsRefused(_ option: String) {
        var options = [option]
        #expect(throws: OwnershipViewError.self) { try OwnershipView.take(from: &options) }
    }

    @Test func attributesShowTheViewAndKeepTheirType() {
        var info = stat()
        info.st_mode = S_IFDIR | 0o4775
        info.st_uid = 1000
        info.st_gid = 1000
        let shown = OwnershipView(owner: 7, umask: 0o022).shown(info)
        #expect(shown.st_uid == 7 && shown.st_gid == 1000 && shown.st_mode == S_IFDIR | 0o4755)
        #expect(OwnershipView().shown(info).st_mode == info.st_mode)
    }

    @Test func aRemountMayNameWhatTheKernelShowsOfTheMount() {
        for option in ["remount", "ro", "rw", "nosuid", "relatime", "user_id=0", "group_id=0", "default_permissions"] {
            #expect(Filesystem.passesRemount(option), "\(option)")
        }
        for option in ["allow_other", "max_read=4096", "sync", "noatime"] {
            #expect(!Filesystem.passesRemount(option), "\(option)")
        }
    }
}
