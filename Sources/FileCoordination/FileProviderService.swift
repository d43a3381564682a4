import LinuxSystem
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A named service that a provider vends for an item and everything inside it — the role of
/// Apple's `NSFileProviderService` (S1–S5). coordfs carries bytes, not meaning: both sides agree
/// on the name and the protocol beforehand (S5).
public struct FileProviderService: Sendable {
    /// The service's name, reverse-DNS by convention.
    public let name: String
    /// The item the service was obtained for (bound to it, as Apple's is).
    public let itemURL: URL
    let registration: ServiceRegistrationID
    let domain: CoordinationDomain
    /// Set for a service of a mount served by another process.
    let link: MountLink?

    /// A connection to the provider: a connected stream socket whose other end the provider's
    /// handler received (S3). Fails when the provider has withdrawn the service.
    public func connection() throws -> FileHandle {
        if let link {
            return try link.connect(name, at: try domain.locator.canonicalPath(of: itemURL))
        }
        guard let handler = domain.serviceHandler(registration) else {
            throw FileCoordinationError.noSuchService(name)
        }
        let path = try domain.locator.canonicalPath(of: itemURL)
        var fds: [Int32] = [0, 0]
        do throws(Errno) {
            _ = try check(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds))
        } catch {
            throw FileCoordinationError.systemError("socketpair", error.code)
        }
        let providerEnd = FileHandle(fileDescriptor: fds[1], closeOnDealloc: true)
        DispatchQueue.global().async { handler(providerEnd, path) }
        return FileHandle(fileDescriptor: fds[0], closeOnDealloc: true)
    }

    /// Apple's spelling of `connection()`: `completionHandler` gets, on a background queue, the
    /// connection (a connected stream socket, where Apple hands an `NSXPCConnection`) or the error.
    public func getFileProviderConnection(completionHandler: @escaping @Sendable (FileHandle?, Error?) -> Void) {
        let service = self
        DispatchQueue.global().async {
            do { completionHandler(try service.connection(), nil) } catch { completionHandler(nil, error) }
        }
    }
}

// @unchecked Sendable: immutable; a tuple of a class and a number is not Sendable by itself.
/// A vended service; withdraw it when the provider stops serving.
public final class ServiceRegistration: @unchecked Sendable {
    /// The service's name.
    public let name: String
    let id: ServiceRegistrationID
    let domain: CoordinationDomain
    let remote: (MountLink, Int)?

    init(name: String, id: ServiceRegistrationID, domain: CoordinationDomain, remote: (MountLink, Int)? = nil) {
        self.name = name
        self.id = id
        self.domain = domain
        self.remote = remote
    }

    /// Stops vending: clients no longer find the service, and new connections fail.
    public func withdraw() {
        if let (link, number) = remote { link.withdraw(number) } else { domain.withdrawService(id) }
    }
}

/// Vending and finding services.
public enum FileProviderServices {
    /// Vends `name` for the item at `url` and everything inside it. `handler` runs, on a
    /// background queue, for every connection a client opens, with the provider's end of the
    /// connection and the item the client asked about.
    public static func vend(
        named name: String, forItemAt url: URL, domain: CoordinationDomain = .shared,
        handler: @escaping @Sendable (FileHandle, URL) -> Void
    ) throws -> ServiceRegistration {
        let path = try domain.locator.canonicalPath(of: url)
        guard ItemLocator.exists(path) else { throw FileCoordinationError.noSuchItem(path.string) }
        if let link = domain.link(for: path) {
            // Inside a mount served by another process: vend there, for every process to find.
            let number = try link.vend(name, at: path) { handler($0, $1.fileURL) }
            return ServiceRegistration(
                name: name, id: ServiceRegistrationID(rawValue: UInt64(number)), domain: domain,
                remote: (link, number))
        }
        let owner = CoordinatorIdentity.purpose("service-provider-\(UUID().uuidString)")
        do {
            let id = try domain.engine.vendService(named: name, at: path, owner: owner)
            domain.setServiceHandler({ handler($0, $1.fileURL) }, for: id)
            return ServiceRegistration(name: name, id: id, domain: domain)
        } catch .invalidRequest(let why) {
            throw FileCoordinationError.invalidServiceName(why)
        } catch {
            throw FileCoordinationError.from(error, item: path.string)
        }
    }

    /// The services of the item at `url`: per name, the nearest provider up the tree (S2, S4).
    public static func services(
        forItemAt url: URL, domain: CoordinationDomain = .shared
    ) throws -> [String: FileProviderService] {
        let path = try domain.locator.canonicalPath(of: url)
        var result: [String: FileProviderService] = [:]
        if let link = domain.link(for: path) {
            for name in try link.services(at: path) {
                result[name] = FileProviderService(
                    name: name, itemURL: url, registration: ServiceRegistrationID(rawValue: 0),
                    domain: domain, link: link)
            }
            return result
        }
        for (name, (id, _)) in domain.engine.services(for: path) {
            result[name] = FileProviderService(name: name, itemURL: url, registration: id, domain: domain, link: nil)
        }
        return result
    }

    /// The service `name` of the item at `url`, or `FileCoordinationError.noSuchService`.
    public static func service(
        named name: String, forItemAt url: URL,
        domain: CoordinationDomain = .shared
    ) throws -> FileProviderService {
        guard let service = try services(forItemAt: url, domain: domain)[name] else {
            throw FileCoordinationError.noSuchService(name)
        }
        return service
    }
}

extension FileManager {
    /// Apple's spelling: the services of the item at `url`, delivered on a background queue.
    public func getFileProviderServicesForItem(
        at url: URL,
        completionHandler: @escaping @Sendable ([String: FileProviderService]?, Error?) -> Void
    ) {
        DispatchQueue.global().async {
            do { completionHandler(try FileProviderServices.services(forItemAt: url), nil) } catch {
                completionHandler(nil, error)
            }
        }
    }
}
