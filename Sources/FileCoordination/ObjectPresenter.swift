import Coordination
import CoordinationRuntime
import Foundation

// @unchecked Sendable: it calls its FilePresenter on that presenter's queue only (P2).
/// A `FilePresenter` object as the runtime sees it (`Presenter`): the one place where the
/// engine's requests and notifications, from this process or from another through a mount or
/// daemon, become Foundation's callbacks, each on the presenter's queue (P2).
final class ObjectPresenter: Presenter, @unchecked Sendable {
    let object: FilePresenter

    init(_ object: FilePresenter) { self.object = object }

    /// A presenter's accesses and those of coordinators made with it are one coordinator's (C14, C21).
    var owner: CoordinatorIdentity { Self.identity(of: object) }

    static func identity(of presenter: FilePresenter) -> CoordinatorIdentity {
        .object(UInt64(UInt(bitPattern: ObjectIdentifier(presenter))))
    }

    func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) {
        (
            object.presentedItemURL.flatMap { try? locator.canonicalPath(of: $0) },
            object.primaryPresentedItemURL.flatMap { try? locator.canonicalPath(of: $0) }
        )
    }

    var answeredRequests: PresenterRequest.Kinds { (object as? ExtendedFilePresenter)?.answeredRequests ?? .all }

    func asked(
        _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
        completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
    ) {
        // A presenter is not Sendable, as Apple's is not: it is messaged on its own queue only (P2).
        nonisolated(unsafe) let presenter = object
        let consented: @Sendable ((@Sendable () -> Void)?) -> Void = { completion(nil, $0) }
        let answered: @Sendable (Error?) -> Void = { completion($0, nil) }
        // The callback may read `AccessOrigin.current` and keep `PresenterProgress.current`.
        presenter.perform {
            CurrentMessage.with(origin, progress: progress) {
                switch request {
                case .relinquishToReader, .relinquishToWriter:
                    let toWriter = request == .relinquishToWriter
                    if let extended = presenter as? ExtendedFilePresenter {
                        extended.relinquishPresentedItem(toWriter: toWriter, completion: completion)
                    } else if toWriter {
                        presenter.relinquishPresentedItem(toWriter: consented)
                    } else {
                        presenter.relinquishPresentedItem(toReader: consented)
                    }
                case .saveChanges: presenter.savePresentedItemChanges(completionHandler: answered)
                case .accommodateDeletion: presenter.accommodatePresentedItemDeletion(completionHandler: answered)
                case .accommodateSubitemDeletion(let path):
                    presenter.accommodatePresentedSubitemDeletion(at: path.fileURL, completionHandler: answered)
                case .accommodateEviction: presenter.accommodatePresentedItemEviction(completionHandler: answered)
                }
            }
        }
    }

    func told(
        _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
        moved: @escaping @Sendable () -> Void
    ) {
        // A presenter is not Sendable, as Apple's is not: it is messaged on its own queue only (P2).
        nonisolated(unsafe) let presenter = object
        presenter.perform {
            CurrentMessage.with(origin) {
                var sentDidChange = false
                for notification in notifications {
                    func deliver() {
                        switch notification {
                        case .didMove(let path): presenter.presentedItemDidMove(to: path.fileURL)
                        case .didChange: presenter.presentedItemDidChange(); sentDidChange = true
                        // Apple has one callback for a change of contents and of attributes: once.
                        case .didChangeAttributes:
                            if !sentDidChange { presenter.presentedItemDidChange() }
                            sentDidChange = true
                        case .subitemDidAppear(let path): presenter.presentedSubitemDidAppear(at: path.fileURL)
                        case .subitemDidMove(let from, let to):
                            presenter.presentedSubitem(at: from.fileURL, didMoveTo: to.fileURL)
                        case .subitemDidChange(let path), .subitemDidChangeAttributes(let path):
                            presenter.presentedSubitemDidChange(at: path.fileURL)
                        case .subitemWasDeleted(let path):
                            if let extended = presenter as? ExtendedFilePresenter {
                                extended.presentedSubitemWasDeleted(at: path.fileURL)
                            } else {
                                UnimplementedCallback.note()
                            }  // no Apple callback
                        case .itemWasDeleted:
                            (presenter as? ExtendedFilePresenter)?.presentedItemWasDeleted()
                        case .coordinationWasBroken:
                            (presenter as? ExtendedFilePresenter)?.presentedItemCoordinationWasBroken()
                        case .versionNews(let news, let id):
                            guard let item = presenter.presentedItemURL else { break }
                            let version = FileVersion.told(item: item, id: id)
                            switch news {
                            case .gained, .gainedConflict: presenter.presentedItemDidGain(version)
                            case .lost: presenter.presentedItemDidLose(version)
                            case .resolved: presenter.presentedItemDidResolveConflict(version)
                            }
                        case .subitemVersionNews(let path, let news, let id):
                            let version = FileVersion.told(item: path.fileURL, id: id)
                            switch news {
                            case .gained, .gainedConflict:
                                presenter.presentedSubitem(at: path.fileURL, didGain: version)
                            case .lost: presenter.presentedSubitem(at: path.fileURL, didLose: version)
                            case .resolved: presenter.presentedSubitem(at: path.fileURL, didResolve: version)
                            }
                        }
                    }
                    if presentsPackage && notification.isSubitemNotification && !sentDidChange {
                        // Only a package's presenter may need did-change instead; asking the thread
                        // whether a default ran costs more than most callbacks.
                        if UnimplementedCallback.reachedDefault(deliver) {
                            presenter.presentedItemDidChange()  // P20, C45
                            sentDidChange = true
                        }
                    } else {
                        deliver()
                    }
                    if case .didMove = notification { moved() }
                }
            }
        }
    }

    func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { object.perform(reacquirer) }
}

extension CoordinationDomain {
    /// Registers `presenter` in this domain (`FileCoordinator.addFilePresenter` does it in the
    /// shared one). The domain keeps it until it is removed.
    public func addFilePresenter(_ presenter: FilePresenter) {
        register(ObjectPresenter(presenter), key: ObjectIdentifier(presenter), linked: true)
        // A callback that never comes is said once, where the presenter asks for it.
        if !presenter.observedPresentedItemUbiquityAttributes.isEmpty {
            report(
                .neverCalled(
                    presentedItem: presenter.presentedItemURL?.path ?? "(no item yet)",
                    callback: "presentedItemDidChangeUbiquityAttributes(_:)",
                    why: "Linux has no ubiquitous (iCloud) items"))
        }
    }

    /// Unregisters `presenter`; unknown presenters are ignored.
    public func removeFilePresenter(_ presenter: FilePresenter) { unregister(key: ObjectIdentifier(presenter)) }

    /// The presenters registered in this domain, in registration order.
    public var filePresenters: [FilePresenter] { registeredPresenters.compactMap { ($0 as? ObjectPresenter)?.object } }

    func presenterID(of presenter: FilePresenter) -> PresenterID? { presenterID(forKey: ObjectIdentifier(presenter)) }

    /// Reads the presenter's URLs again and re-indexes it (C22, P8).
    func refresh(_ presenter: FilePresenter) {
        if let id = presenterID(of: presenter) { refresh(id) }
    }
}
