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

/// Foundation's name for file versions, which swift-corelibs-foundation does not have.
public typealias NSFileVersion = FileVersion
#endif
