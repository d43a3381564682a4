@testable import CoordFSMount
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The bits a write, a truncation or an fallocate by someone without CAP_FSETID clears, as
/// Linux's setattr_should_drop_suidgid: fstests generic/683-685's table, and its rows for a
/// writer in the file's group.
@Suite struct PrivilegeBitsTests {
    @Test func setuidAlwaysAndSetgidWithGroupExecuteOrForAWriterOutsideTheGroup() {
        // (mode, the writer is in the file's group, what a write clears)
        let table: [(mode_t, Bool, mode_t)] = [
            (0o6666, false, 0o6000),  // generic/683 test 1: neither has group execute
            (0o6676, false, 0o6000),  // test 2
            (0o6766, false, 0o6000),  // test 3
            (0o6777, false, 0o6000),  // test 4
            (0o2676, false, 0o2000),  // test 9
            (0o2666, false, 0o2000),
            (0o6666, true, 0o4000),  // a member keeps setgid without group execute
            (0o2666, true, 0),
            (0o2676, true, 0o2000),  // but not with it
            (0o4755, true, 0o4000),
            (0o0777, false, 0)
        ]
        for (mode, member, cleared) in table {
            #expect(
                Filesystem.privilegeBits(mode, writerInGroup: { member }) == cleared,
                "\(String(mode, radix: 8)) by a \(member ? "member" : "non-member")")
        }
    }

    /// The writer's groups (which may mean reading /proc) are asked only when they decide.
    @Test func theGroupsAreAskedOnlyForSetgidWithoutGroupExecute() {
        var asked = 0
        for mode: mode_t in [0o4755, 0o2775, 0o6777, 0o0666] {
            _ = Filesystem.privilegeBits(
                mode,
                writerInGroup: {
                    asked += 1; return false
                })
        }
        #expect(asked == 0)
        _ = Filesystem.privilegeBits(
            0o2664,
            writerInGroup: {
                asked += 1; return false
            })
        #expect(asked == 1)
    }

    /// A caller's filesystem group makes it a member without a look at /proc; a caller whose
    /// thread is gone is a member of that group alone. Only regular files lose bits.
    @Test func aCallersGroupAndTheKindOfFile() {
        let caller = RequestCaller(uid: 65534, gid: 4242, thread: 0, umask: 0)
        #expect(caller.isInGroup(4242) && !caller.isInGroup(0))
        var info = stat()
        info.st_mode = S_IFREG | 0o2666
        info.st_gid = 4242
        #expect(Filesystem.privilegeBits(of: info, clearedFor: caller) == 0)
        info.st_gid = 0
        #expect(Filesystem.privilegeBits(of: info, clearedFor: caller) == S_ISGID)
        info.st_mode = S_IFDIR | 0o2777
        #expect(Filesystem.privilegeBits(of: info, clearedFor: caller) == 0)
    }
}
