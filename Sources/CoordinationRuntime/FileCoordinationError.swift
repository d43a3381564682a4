import Coordination
import Foundation

/// Errors of coordfs's coordination API that Foundation has no code for.
///
/// Mapping to Apple: cancellation is `CocoaError(.userCancelled)` (3072) exactly as on Apple
/// platforms, and a presenter's error fails the access with that very error. The cases below are
/// what Apple either raises as an exception (programmer errors) or cannot report at all (it waits
/// forever): coordfs throws instead, so nothing crashes and nothing hangs.
public enum FileCoordinationError: Error, Equatable, CustomStringConvertible {
    /// The URL is not a `file:` URL or not absolute (C26).
    case invalidURL(String)
    /// A coordination call with no intent.
    case emptyIntentList
    /// Options that are not valid together, or not valid for this call (C25, O10).
    case invalidOptions(String)
    /// Waiting for `item` lasted longer than the coordinator's `waitTimeout` (X5).
    case timedOut(item: String)
    /// Waiting for `item` would close a cycle of coordinators (X1); the cycle, as identities.
    case deadlock(item: String, cycle: [String])
    /// `item(at:didMoveTo:)` outside a coordinated write (C24).
    case moveReportedOutsideWrite
    /// A non-blocking attempt found `item` held.
    case wouldBlock(item: String)
    /// A named service that the item does not have (S2, S4).
    case noSuchService(String)
    /// A service name that is empty, too long, or holds a newline.
    case invalidServiceName(String)
    /// The item has no such file or directory where one is needed.
    case noSuchItem(String)
    /// The operating system refused something (creating a snapshot, a socket); errno.
    case systemError(String, Int32)
    /// The accessor ran, but another's access to the item may have gone ahead while it did: on
    /// a shared mount a hold delays other users only for the mount's break time
    /// (docs/sharing.md); on a host of a shared store a hold lasts only while the host's lease
    /// does (docs/cluster.md). What the accessor read or wrote may have been changed or read
    /// meanwhile.
    case coordinationBroken(String)

    /// What happened, naming the item where there is one.
    public var description: String {
        switch self {
        case .invalidURL(let why): return "invalid URL for coordination: \(why)"
        case .emptyIntentList: return "a coordination call needs at least one intent"
        case .invalidOptions(let why): return "invalid options: \(why)"
        case .timedOut(let item): return "timed out waiting for coordinated access to \(item)"
        case .deadlock(let item, let cycle):
            return "waiting for \(item) would deadlock: " + cycle.joined(separator: " -> ")
        case .moveReportedOutsideWrite: return "item(at:didMoveTo:) is only allowed inside a coordinated write"
        case .wouldBlock(let item): return "\(item) is held by another coordinator"
        case .noSuchService(let name): return "the item has no service named '\(name)'"
        case .invalidServiceName(let why): return "invalid service name: \(why)"
        case .noSuchItem(let path): return "no such file or directory: \(path)"
        case .systemError(let what, let code): return "\(what): \(String(cString: strerror(code)))"
        case .coordinationBroken(let path):
            return
                "another's access to \(path) may have gone ahead while the accessor ran (another user's at the break time, or another host's once this host's cover was lost)"
        }
    }

    /// The API's error for an engine refusal of an access to `item` (the first item, for an
    /// access to several).
    package static func from(_ error: CoordinationError, item: String) -> Error {
        switch error {
        case .cancelled, .ownerGone: return CocoaError(.userCancelled)
        case .timedOut, .brokenThrough: return FileCoordinationError.timedOut(item: item)
        case .deadlock(let cycle):
            return FileCoordinationError.deadlock(item: item, cycle: cycle.map(AccessOrigins.describe))
        case .wouldBlock: return FileCoordinationError.wouldBlock(item: item)
        case .notInsideWrite: return FileCoordinationError.moveReportedOutsideWrite
        case .invalidRequest(let why): return FileCoordinationError.invalidOptions(why)
        case .unknownRegistration: return FileCoordinationError.noSuchService("(withdrawn)")
        }
    }
}

/// As an `NSError`: in `NSCocoaErrorDomain`, with Apple's code where Apple reports the same
/// condition, and a code of coordfs's own (from 100 001, outside Apple's ranges; stable) where
/// Apple has none, because it raises an exception or waits for ever instead. The user info
/// holds the description and, where the error is about an item, `NSFilePathErrorKey` (for an
/// access to several items, the first).
///
/// | case | code |
/// | --- | --- |
/// | `noSuchItem` | 4 (`NSFileNoSuchFileError`) |
/// | `timedOut` | 255 (`NSFileLockingError`) |
/// | `invalidURL` | 262 (`NSFileReadUnsupportedSchemeError`) |
/// | `systemError` | 4, 257 (`NSFileReadNoPermissionError`) or 640 (`NSFileWriteOutOfSpaceError`) by its errno, else 512 (`NSFileWriteUnknownError`); the errno as `NSUnderlyingErrorKey` |
/// | `emptyIntentList` | 100 001 |
/// | `invalidOptions` | 100 002 |
/// | `deadlock` | 100 003 |
/// | `moveReportedOutsideWrite` | 100 004 |
/// | `wouldBlock` | 100 005 |
/// | `noSuchService` | 100 006 |
/// | `invalidServiceName` | 100 007 |
/// | `coordinationBroken` | 100 008 |
///
/// Cancellation is `CocoaError(.userCancelled)` (3072), as on Apple platforms.
extension FileCoordinationError: CustomNSError, LocalizedError {
    /// `NSCocoaErrorDomain`, as Apple's file coordination errors.
    public static var errorDomain: String { NSCocoaErrorDomain }

    /// Apple's code where Apple reports the same condition, else one of coordfs's own (table above).
    public var errorCode: Int {
        switch self {
        case .noSuchItem: return CocoaError.Code.fileNoSuchFile.rawValue
        case .timedOut: return CocoaError.Code.fileLocking.rawValue
        case .invalidURL: return CocoaError.Code.fileReadUnsupportedScheme.rawValue
        case .systemError(_, let code):
            switch code {
            case ENOENT: return CocoaError.Code.fileNoSuchFile.rawValue
            case EACCES, EPERM: return CocoaError.Code.fileReadNoPermission.rawValue
            case ENOSPC: return CocoaError.Code.fileWriteOutOfSpace.rawValue
            default: return CocoaError.Code.fileWriteUnknown.rawValue
            }
        case .emptyIntentList: return 100_001
        case .invalidOptions: return 100_002
        case .deadlock: return 100_003
        case .moveReportedOutsideWrite: return 100_004
        case .wouldBlock: return 100_005
        case .noSuchService: return 100_006
        case .invalidServiceName: return 100_007
        case .coordinationBroken: return 100_008
        }
    }

    /// The description, and `NSFilePathErrorKey` or `NSUnderlyingErrorKey` where they apply.
    public var errorUserInfo: [String: Any] {
        var info: [String: Any] = [NSLocalizedDescriptionKey: description]
        switch self {
        case .noSuchItem(let path), .coordinationBroken(let path), .timedOut(let path), .deadlock(let path, _),
            .wouldBlock(let path):
            info[NSFilePathErrorKey] = path
        case .systemError(_, let code):
            info[NSUnderlyingErrorKey] = NSError(domain: NSPOSIXErrorDomain, code: Int(code))
        default: break
        }
        return info
    }

    /// The description, for `localizedDescription`.
    public var errorDescription: String? { description }
}

extension FileCoordinationError {
    /// The errno that reports `error` — a refusal of the engine, a presenter's error, a
    /// cancellation — to a process: the one mapping the mount and the control socket share.
    /// `cancellation` is the errno for a cancelled wait (EINTR for an interrupted system call,
    /// ECANCELED for a cancelled request).
    public static func errno(for error: Error, cancellation: Int32) -> Int32 {
        // What the engine's refusals become (`from`) answers as those refusals do: one table.
        func refusal(_ reason: CoordinationError) -> Int32 { reason.errno(cancellation: cancellation) }
        switch error {
        case let error as FileCoordinationError:
            switch error {
            case .timedOut: return refusal(.timedOut)
            case .deadlock: return refusal(.deadlock(cycle: []))
            case .wouldBlock: return refusal(.wouldBlock)
            case .moveReportedOutsideWrite: return refusal(.notInsideWrite)
            case .invalidOptions(let why): return refusal(.invalidRequest(why))
            case .noSuchService: return refusal(.unknownRegistration)
            case .invalidURL, .emptyIntentList, .invalidServiceName: return EINVAL
            case .noSuchItem: return ENOENT
            case .systemError(_, let code): return code
            case .coordinationBroken: return EIO  // as Linux reports a lost NFS lock
            }
        case let error as CocoaError where error.code == .userCancelled:
            return refusal(.cancelled)
        case let error as CoordinationError:
            return refusal(error)
        case let failure as AccessFailure:
            return failure.errno(cancellation: cancellation)
        case let error as POSIXError:
            return error.code.rawValue  // a presenter's refusal, as it gave it
        default:
            return EACCES  // a presenter refused without an errno
        }
    }
}

extension Error {
    /// True for the user-cancelled error that cancellation produces.
    public var isCoordinationCancellation: Bool {
        (self as? CocoaError)?.code == .userCancelled
    }
}
