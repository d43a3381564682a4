import LinuxSystem
import Coordination
import CoordinationRuntime
import Foundation

/// A read-only copy of an item made under a coordinated read with forUploading (O4): a file is
/// copied, a directory becomes one tar archive. It lives in a private temporary directory and is
/// removed when the accessor returns.
struct UploadSnapshot {
    let url: URL
    private let directory: URL

    init(of path: ItemPath) throws {
        let fileManager = FileManager.default
        let directory = fileManager.temporaryDirectory
            .appendingPathComponent("coordfs-upload-\(UUID().uuidString)", isDirectory: true)
        try fileManager.createDirectory(
            at: directory, withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o700])
        self.directory = directory
        let name = path.isRoot ? "root" : String(path.lastComponent)
        do {
            if ItemLocator.isDirectory(path) {
                url = directory.appendingPathComponent(name + ".tar")
                try TarArchive.write(directory: path.fileURL, to: url)
            } else {
                url = directory.appendingPathComponent(name)
                try fileManager.copyItem(at: path.fileURL, to: url)
            }
            try fileManager.setAttributes([.posixPermissions: 0o400], ofItemAtPath: url.path)
        } catch {
            try? fileManager.removeItem(at: directory)
            throw error
        }
    }

    func remove() {
        try? FileManager.default.removeItem(at: directory)
    }
}

/// A minimal POSIX ustar writer, with pax headers for long names: enough to archive a directory
/// tree of regular files, directories and symbolic links.
enum TarArchive {
    static func write(directory: URL, to archive: URL) throws {
        guard FileManager.default.createFile(atPath: archive.path, contents: nil) else {
            let failure = Errno.ofFailedCall()
            throw FileCoordinationError.systemError("cannot create \(archive.path)", failure.code)
        }
        let handle = try FileHandle(forWritingTo: archive)
        defer { try? handle.close() }
        let root = directory.lastPathComponent
        try addEntry(at: directory, name: root, into: handle)
        try handle.write(contentsOf: Data(count: 1024))
    }

    private static func addEntry(at url: URL, name: String, into handle: FileHandle) throws {
        let fileManager = FileManager.default
        let attributes = try fileManager.attributesOfItem(atPath: url.path)
        let type = attributes[.type] as? FileAttributeType
        let mode = (attributes[.posixPermissions] as? Int) ?? 0o644
        let mtime = Int((attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0)
        switch type {
        case .typeDirectory?:
            try writeHeader(name: name + "/", size: 0, mode: mode, mtime: mtime, type: "5", link: "", into: handle)
            for child in try fileManager.contentsOfDirectory(atPath: url.path).sorted() {
                try addEntry(at: url.appendingPathComponent(child), name: name + "/" + child, into: handle)
            }
        case .typeSymbolicLink?:
            let target = try fileManager.destinationOfSymbolicLink(atPath: url.path)
            try writeHeader(name: name, size: 0, mode: mode, mtime: mtime, type: "2", link: target, into: handle)
        case .typeRegular?:
            let data = try Data(contentsOf: url)
            try writeHeader(name: name, size: data.count, mode: mode, mtime: mtime, type: "0", link: "", into: handle)
            try handle.write(contentsOf: data)
            try handle.write(contentsOf: Data(count: (512 - data.count % 512) % 512))
        default:
            break  // sockets, fifos and devices carry no content to upload
        }
    }

    private static func writeHeader(
        name: String, size: Int, mode: Int, mtime: Int, type: Character,
        link: String, into handle: FileHandle
    ) throws {
        if name.utf8.count > 100 || link.utf8.count > 100 {
            var records = ""
            for (key, value) in [("path", name), ("linkpath", link)] where !value.isEmpty {
                let body = " \(key)=\(value)\n"
                var length = body.utf8.count + 1
                while "\(length)\(body)".utf8.count != length { length = "\(length)\(body)".utf8.count }
                records += "\(length)\(body)"
            }
            let data = Data(records.utf8)
            try handle.write(
                contentsOf: header(name: "PaxHeader", size: data.count, mode: 0o644, mtime: mtime, type: "x", link: ""))
            try handle.write(contentsOf: data)
            try handle.write(contentsOf: Data(count: (512 - data.count % 512) % 512))
        }
        try handle.write(contentsOf: header(name: name, size: size, mode: mode, mtime: mtime, type: type, link: link))
    }

    private static func header(name: String, size: Int, mode: Int, mtime: Int, type: Character, link: String) -> Data {
        var block = [UInt8](repeating: 0, count: 512)
        func put(_ string: String, at offset: Int, width: Int) {
            for (i, byte) in string.utf8.prefix(width).enumerated() { block[offset + i] = byte }
        }
        func octal(_ value: Int, at offset: Int, width: Int) {
            put(
                String(String(value, radix: 8).suffix(width - 1)).leftPadded(to: width - 1), at: offset,
                width: width - 1)
        }
        put(name, at: 0, width: 100)
        octal(mode & 0o7777, at: 100, width: 8)
        octal(0, at: 108, width: 8)
        octal(0, at: 116, width: 8)
        octal(size, at: 124, width: 12)
        octal(mtime, at: 136, width: 12)
        put("        ", at: 148, width: 8)
        put(String(type), at: 156, width: 1)
        put(link, at: 157, width: 100)
        put("ustar", at: 257, width: 6)
        put("00", at: 263, width: 2)
        let checksum = block.reduce(0) { $0 + Int($1) }
        put(String(String(checksum, radix: 8)).leftPadded(to: 6), at: 148, width: 6)
        block[154] = 0
        block[155] = UInt8(ascii: " ")
        return Data(block)
    }
}

private extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
