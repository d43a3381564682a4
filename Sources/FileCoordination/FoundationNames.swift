@_exported import CoordinationRuntime
import Foundation

#if !canImport(Darwin)
/// Foundation's names for the coordination types, which swift-corelibs-foundation does not
/// have: code written for Apple platforms compiles on Linux with `import FileCoordination`
/// added and nothing else changed. (Where Foundation has them, these are its own.)
public typealias NSFileCoordinator = FileCoordinator
public typealias NSFilePresenter = FilePresenter
public typealias NSFileAccessIntent = FileAccessIntent
#endif

#if !canImport(Darwin)
/// Foundation's `NSErrorPointer` (on Apple platforms an Objective-C autoreleasing pointer, which
/// Linux does not have): `error: &error` passes a `var error: NSError?` as it does there.
public typealias NSErrorPointer = UnsafeMutablePointer<NSError?>?

/// Apple's file versions, which swift-corelibs-foundation does not have: a presenter's version
/// callbacks (`presentedItemDidGain(_:)` and the others) would never be called, so they do not
/// compile, and say why.
@available(*, unavailable, message: "file versions do not exist on Linux: coordfs never calls presentedItemDidGain, presentedItemDidLose, presentedItemDidResolveConflict or their subitem forms")
public final class NSFileVersion {}
#endif
