import LinuxSystem
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One record of readdir(3), read in place. A record is only as long as its name: `d_name` is
/// declared as 256 bytes, and copying it whole (as `entry.pointee` does) reads past the end of
/// glibc's buffer for the last record of a read, and faults when the next page is not mapped.
struct DirectoryEntry {
    let name: String
    let number: UInt64
    /// The type as `st_mode` bits (0 when the filesystem does not tell).
    let type: mode_t
    /// Where the next record starts, for seekdir.
    let next: off_t

    init(_ entry: UnsafePointer<dirent>) {
        name = FileSystemName.string(
            cString: UnsafeRawPointer(entry.pointer(to: \.d_name)!).assumingMemoryBound(to: CChar.self))
        number = UInt64(entry.pointer(to: \.d_ino)!.pointee)
        type = mode_t(entry.pointer(to: \.d_type)!.pointee) << 12
        next = entry.pointer(to: \.d_off)!.pointee
    }
}
