@testable import CoordFSMount
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Evicted descriptors are closed on the closer's thread, on another CPU than the request's.
@Suite(.serialized) struct DescriptorCloserPlacement {
    /// The CPUs the closer thread may run on, from /proc (nil before it exists).
    static func closerCPUs() -> Set<Int>? {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
        for task in tasks {
            let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
            guard comm.hasPrefix("coordfs-closer"),
                let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed_list:") })
            else { continue }
            var cpus = Set<Int>()
            for range in line.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces).split(
                separator: ",")
            {
                let ends = range.split(separator: "-").compactMap { Int($0) }
                if let first = ends.first { cpus.formUnion(first...(ends.last ?? first)) }
            }
            return cpus
        }
        return nil
    }

    /// Whether `fd` is still open on the file `file` (its device and inode): tests running
    /// beside this one open files too, and may be given a number the closer has closed.
    static func isOpen(_ fd: Int32, on file: stat) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_dev == file.st_dev && info.st_ino == file.st_ino
    }

    @Test(
        .enabled(if: sysconf(Int32(_SC_NPROCESSORS_ONLN)) >= 2, "one CPU: there is nowhere else to close them"),
        arguments: [Int32(0), 1])
    func descriptorsAreClosedAwayFromTheEvictingCPU(cpu: Int32) throws {
        let cpus = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        // A file of this test's own, so that a number reused by another test is told apart.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("closer-\(getpid())-\(cpu)").path
        let made = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        try #require(made >= 0)
        defer { unlink(path) }
        var file = stat()
        try #require(fstat(made, &file) == 0)
        let descriptors = [made] + (1..<50).map { _ in open(path, O_RDONLY | O_CLOEXEC) }
        try #require(descriptors.allSatisfy { $0 >= 0 })
        DescriptorCloser.shared.close(descriptors, awayFrom: cpu)
        let stillOpen = { descriptors.contains { Self.isOpen($0, on: file) } }
        let deadline = Date().addingTimeInterval(10)
        while stillOpen() && Date() < deadline { usleep(1000) }
        #expect(!stillOpen(), "all closed")
        let allowed = try #require(Self.closerCPUs(), "the closer thread exists")
        #expect(!allowed.contains(Int(cpu)), "runs away from CPU \(cpu): \(allowed)")
        // Anywhere else: not pinned where the thread that started it was.
        #expect(allowed == Set(0..<cpus).subtracting([Int(cpu)]), "\(allowed) of \(cpus)")
    }
}
