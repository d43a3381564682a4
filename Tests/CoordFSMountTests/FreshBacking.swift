import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under the temporary directory for a test's inode table, opened as its
/// root (the table takes the descriptor); `remove()` takes the directory away.
struct FreshBacking {
    let path: String
    let rootFD: Int32
    let rootInfo: stat

    init(_ prefix: String) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        rootFD = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(rootFD >= 0)
        var info = stat()
        try #require(fstat(rootFD, &info) == 0)
        rootInfo = info
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}
