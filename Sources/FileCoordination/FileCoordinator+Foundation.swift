import CoordinationRuntime
import Foundation

/// Foundation's own signatures, beside the Swift-native ones: code written for
/// `NSFileCoordinator` on Apple platforms compiles with the type names changed (or with none
/// changed, through the `NSFileCoordinator` typealiases of `FoundationNames.swift`).
///
/// As on Apple platforms, when coordination fails the accessor is not called and `outError`
/// says why (`FileCoordinationError` bridges to `NSError` in `NSCocoaErrorDomain`). One
/// difference: coordination that another user (on a shared mount) or another host (on a shared
/// store) broke while the accessor ran is reported in `outError` after the accessor has run, as
/// `coordinationBroken`.
extension FileCoordinator {
    /// Foundation's form of `coordinate(readingItemAt:options:byAccessor:)`: an error goes to `outError` and the accessor does not run.
    public func coordinate(
        readingItemAt url: URL, options: ReadingOptions = [], error outError: NSErrorPointer,
        byAccessor reader: (URL) -> Void
    ) {
        reporting(into: outError) { try coordinate(readingItemAt: url, options: options) { reader($0) } }
    }

    /// Foundation's form of `coordinate(writingItemAt:options:byAccessor:)`: an error goes to `outError` and the accessor does not run.
    public func coordinate(
        writingItemAt url: URL, options: WritingOptions = [], error outError: NSErrorPointer,
        byAccessor writer: (URL) -> Void
    ) {
        reporting(into: outError) { try coordinate(writingItemAt: url, options: options) { writer($0) } }
    }

    /// Foundation's form of the read-and-write `coordinate(readingItemAt:options:writingItemAt:options:byAccessor:)` (C7).
    public func coordinate(
        readingItemAt readingURL: URL, options readingOptions: ReadingOptions = [],
        writingItemAt writingURL: URL, options writingOptions: WritingOptions = [],
        error outError: NSErrorPointer, byAccessor readerWriter: (URL, URL) -> Void
    ) {
        reporting(into: outError) {
            try coordinate(
                readingItemAt: readingURL, options: readingOptions, writingItemAt: writingURL,
                options: writingOptions
            ) { readerWriter($0, $1) }
        }
    }

    /// Foundation's form of the two-write `coordinate(writingItemAt:options:writingItemAt:options:byAccessor:)` (C7).
    public func coordinate(
        writingItemAt url1: URL, options options1: WritingOptions = [],
        writingItemAt url2: URL, options options2: WritingOptions = [],
        error outError: NSErrorPointer, byAccessor writer: (URL, URL) -> Void
    ) {
        reporting(into: outError) {
            try coordinate(writingItemAt: url1, options: options1, writingItemAt: url2, options: options2) {
                writer($0, $1)
            }
        }
    }

    /// Foundation's form of `prepare(forReadingItemsAt:options:writingItemsAt:options:byAccessor:)` (C9).
    public func prepare(
        forReadingItemsAt readingURLs: [URL], options readingOptions: ReadingOptions = [],
        writingItemsAt writingURLs: [URL], options writingOptions: WritingOptions = [],
        error outError: NSErrorPointer, byAccessor batchAccessor: (@escaping @Sendable () -> Void) -> Void
    ) {
        reporting(into: outError) {
            try prepare(
                forReadingItemsAt: readingURLs, options: readingOptions, writingItemsAt: writingURLs,
                options: writingOptions, byAccessor: batchAccessor)
        }
    }

    /// Runs `body`; a thrown error goes to `outError` as an `NSError` (left alone on success).
    private func reporting(into outError: NSErrorPointer, _ body: () throws -> Void) {
        do { try body() } catch { outError?.pointee = error as NSError }
    }
}
