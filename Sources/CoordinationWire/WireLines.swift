/// The whole lines of what a connection has read so far.
public enum WireLines {
    /// Hands each whole line of `pending` (without its newline) to `handle`, in order and where
    /// it lies, then drops the lines handled together; what follows the last newline stays for
    /// the next read. Dropping each line as it is handled would move the rest of a read down
    /// every time, quadratic in the lines one read brings. When `handle` throws, the lines
    /// before the one it threw for are dropped and the error goes on.
    @inlinable
    public static func take<Failure: Error>(
        from pending: inout [UInt8],
        _ handle: (ArraySlice<UInt8>) throws(Failure) -> Void
    ) throws(Failure) {
        var start = pending.startIndex
        defer { pending.removeSubrange(..<start) }
        while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
            try handle(pending[start..<newline])
            start = newline + 1
        }
    }
}
