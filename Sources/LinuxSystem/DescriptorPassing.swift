#if canImport(Glibc)
import Glibc
#endif

/// Sending and receiving a line with a file descriptor attached (SCM_RIGHTS), for service
/// connections. The descriptor rides on the line's first byte; a reader keeps descriptors in
/// arrival order and gives each to the next line that carries one (a `connect` reply or a
/// `SERVICE_CONNECTION` event).
public enum DescriptorPassing {
    private static let controlSpace = 24  // CMSG_SPACE(sizeof(int)) on 64-bit Linux
    private static let controlLength = 20  // CMSG_LEN(sizeof(int))
    private static let rights: Int32 = 1  // SCM_RIGHTS

    /// One `sendmsg` of `bytes` with `descriptor` attached: the count sent (the descriptor goes
    /// with the first byte), or -1 with errno set, as the call it makes (for `check` or
    /// `retryingInterrupts`). `flags` adds to MSG_NOSIGNAL.
    public static func send(
        _ socket: Int32, _ bytes: UnsafeRawBufferPointer, descriptor: Int32, flags: Int32 = 0
    ) -> Int {
        var control = (UInt64(0), UInt64(0), UInt64(0))  // controlSpace bytes, 8-aligned
        return withUnsafeMutableBytes(of: &control) { controlBuffer in
            controlBuffer.storeBytes(of: UInt(controlLength), toByteOffset: 0, as: UInt.self)
            controlBuffer.storeBytes(of: SOL_SOCKET, toByteOffset: 8, as: Int32.self)
            controlBuffer.storeBytes(of: rights, toByteOffset: 12, as: Int32.self)
            controlBuffer.storeBytes(of: descriptor, toByteOffset: 16, as: Int32.self)
            var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                var message = msghdr()
                message.msg_iov = vectorPointer
                message.msg_iovlen = 1
                message.msg_control = controlBuffer.baseAddress
                message.msg_controllen = controlSpace
                return sendmsg(socket, &message, Int32(MSG_NOSIGNAL) | flags)
            }
        }
    }

    /// Reads into `buffer`; returns the byte count (0 at end) and any descriptors that came with
    /// them. A read a signal interrupts before any byte came is made again; one that fails brings
    /// no descriptors and throws its errno.
    public static func receive(
        _ socket: Int32, into buffer: inout [UInt8]
    ) throws(Errno) -> (count: Int, descriptors: [Int32]) {
        var control = [UInt8](repeating: 0, count: controlSpace * 4)
        var result = (-1, 0)
        repeat {
            result = buffer.withUnsafeMutableBytes { data in
                control.withUnsafeMutableBytes { controlBuffer -> (Int, Int) in
                    var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                    return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                        var message = msghdr()
                        message.msg_iov = vectorPointer
                        message.msg_iovlen = 1
                        message.msg_control = controlBuffer.baseAddress
                        message.msg_controllen = controlBuffer.count
                        let count = recvmsg(socket, &message, Int32(MSG_CMSG_CLOEXEC))
                        return (count, Int(message.msg_controllen))
                    }
                }
            }
        } while result.0 == -1 && Errno.current == .interrupted  // a signal before any byte
        if result.0 == -1 { throw Errno.current }
        var descriptors: [Int32] = []
        var offset = 0
        while offset + 16 <= result.1 {
            let length = control.withUnsafeBytes { Int($0.load(fromByteOffset: offset, as: UInt.self)) }
            let level = control.withUnsafeBytes { $0.load(fromByteOffset: offset + 8, as: Int32.self) }
            let type = control.withUnsafeBytes { $0.load(fromByteOffset: offset + 12, as: Int32.self) }
            if level == SOL_SOCKET && type == rights && length >= 16 {
                for index in 0..<((length - 16) / 4) {
                    descriptors.append(
                        control.withUnsafeBytes { $0.load(fromByteOffset: offset + 16 + index * 4, as: Int32.self) })
                }
            }
            guard length > 0 else { break }
            offset += (length + 7) & ~7
        }
        return (result.0, descriptors)
    }
}
