import Coordination
import CoordinationRuntime
import Foundation

/// Turns the paths clients send into the engine's facts, and the real paths whose modes decide
/// what a client may do. A mount resolves paths under its mount point to its backing directory;
/// the standalone daemon resolves paths of the host.
public protocol ItemResolver: Sendable {
    /// Throws an errno name ("ENOENT", "EXDEV" for a path outside what this server serves).
    func resolve(_ path: String) throws(ResolveError) -> (target: AccessTarget, realPath: String)
    /// Where permission checks start: clients must be able to search every directory from here
    /// down to an item.
    var permissionBase: String { get }
}

public struct ResolveError: Error, Sendable {
    public let errno: String
    public let message: String
    public init(_ errno: String, _ message: String) {
        self.errno = errno
        self.message = message
    }
}

/// The standalone daemon's resolver: any absolute path of this host, canonicalised as the
/// coordination API does it.
public struct HostItemResolver: ItemResolver {
    let domain: CoordinationDomain
    public init(domain: CoordinationDomain) { self.domain = domain }
    public var permissionBase: String { "/" }

    public func resolve(_ path: String) throws(ResolveError) -> (target: AccessTarget, realPath: String) {
        guard path.hasPrefix("/") else { throw ResolveError("EINVAL", "'\(path)' is not an absolute path") }
        do {
            let target = try domain.accessTarget(for: URL(fileURLWithPath: path))
            return (target, target.path.string)
        } catch {
            throw ResolveError("EINVAL", "'\(path)': \(error)")
        }
    }
}
