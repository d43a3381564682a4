import Coordination
import Foundation

/// Turns the paths a control socket's clients send into the engine's facts, and the real paths
/// whose modes decide what a client may do. A mount resolves paths under its mount point to its
/// backing directory; the standalone daemon resolves paths of the host. (The runtime's, so that
/// a mount resolves its own paths without knowing the server.)
package protocol ItemResolver: Sendable {
    /// Throws an errno name ("ENOENT", "EXDEV" for a path outside what this server serves).
    func resolve(_ path: String) throws(ResolveError) -> (target: AccessTarget, realPath: String)
    /// Where permission checks start: clients must be able to search every directory from here
    /// down to an item.
    var permissionBase: String { get }
}

package struct ResolveError: Error, Sendable {
    package let errno: String
    package let message: String
    package init(_ errno: String, _ message: String) {
        self.errno = errno
        self.message = message
    }
}

/// The standalone daemon's resolver: any absolute path of this host, canonicalised as the
/// coordination API does it.
package struct HostItemResolver: ItemResolver {
    let domain: CoordinationDomain
    package init(domain: CoordinationDomain) { self.domain = domain }
    package var permissionBase: String { "/" }

    package func resolve(_ path: String) throws(ResolveError) -> (target: AccessTarget, realPath: String) {
        guard path.hasPrefix("/") else { throw ResolveError("EINVAL", "'\(path)' is not an absolute path") }
        do {
            let target = try domain.accessTarget(for: URL(fileURLWithPath: path))
            return (target, target.path.string)
        } catch {
            throw ResolveError("EINVAL", "'\(path)': \(error)")
        }
    }
}
