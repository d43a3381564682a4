/// Which presenters hear what, before and after an access. The rules cited are those of
/// `docs/rules.md`; delivery itself is the caller's.
extension State {
    /// Builds deliveries, merging messages per presenter and dropping its owner's (C14).
    struct DeliveryBuilder<Message: Hashable & Sendable> {
        /// The accessor, whose own presenters hear nothing; nil for a change nobody coordinated
        /// (made behind a mount), which every presenter hears.
        let excludedOwner: CoordinatorIdentity?
        private(set) var deliveries: [PresenterDelivery<Message>] = []
        private var indexByPresenter: [PresenterID: Int] = [:]

        init(excluding owner: CoordinatorIdentity?) { excludedOwner = owner }

        mutating func add(
            _ messages: [Message], to id: PresenterID, at path: ItemPath, package: Bool,
            records: [PresenterID: PresenterRecord]
        ) {
            guard !messages.isEmpty, let record = records[id] else { return }
            if let excludedOwner, record.owner.isSameProcess(as: excludedOwner) { return }
            if let index = indexByPresenter[id] {
                for message in messages where !deliveries[index].messages.contains(message) {
                    deliveries[index].messages.append(message)
                }
            } else {
                indexByPresenter[id] = deliveries.count
                deliveries.append(
                    PresenterDelivery(
                        presenter: id, presentedPath: path, presentsPackage: package,
                        messages: messages, accessor: excludedOwner))
            }
        }
    }

    /// The requests to put to presenters before the accessor of `request` runs.
    func requestPlan(for request: AccessRequest) -> [PresenterDelivery<PresenterRequest>] {
        if presenterTree.isEmpty { return [] }
        var builder = DeliveryBuilder<PresenterRequest>(excluding: request.identity)
        for intent in request.intents {
            let path = intent.path
            let target = intent.target
            let packages = target.enclosingPackages
            let direct = presenterTree.presenters(at: path)
            let reachesBeyondItem =
                !packages.isEmpty || request.messagesContents || target.isPackage
                || !intent.kind.writingOptions.isDisjoint(with: WritingOptions.destructive)
            if direct.isEmpty && !reachesBeyondItem { continue }  // the common case: nobody to ask
            var own: [PresenterRequest] = []  // the item and everything it stands for
            var enclosingPackage: [PresenterRequest] = []
            var inside: [PresenterRequest] = []  // items inside a directory being removed
            var enclosingDirectory: [PresenterRequest] = []

            switch intent.kind {
            case .reading(let options):
                if options.contains(.immediatelyAvailableMetadataOnly) { break }  // O3
                own = [.relinquishToReader]  // P4
                if !options.contains(.withoutChanges) { own.append(.saveChanges) }  // O1, P6
                enclosingPackage = own  // P16
            case .writing(let options):
                if options.contains(.contentIndependentMetadataOnly) { break }  // O9
                own = [.relinquishToWriter]  // P5
                if options.contains(.forMerging) { own.append(.saveChanges) }  // O7
                enclosingPackage = own
                let deleting = !options.isDisjoint(with: [.forDeleting, .forReplacing])
                if deleting {
                    own.append(.accommodateDeletion)  // O5, O8, P7
                    enclosingPackage.append(.accommodateSubitemDeletion(path))  // P13, P22
                    enclosingDirectory = [.accommodateSubitemDeletion(path)]  // P13
                }
                let evicting = options.contains(.forEvicting)
                if evicting { own.append(.accommodateEviction) }  // P33
                if target.isDirectory && !options.isDisjoint(with: WritingOptions.destructive) {
                    inside =
                        deleting
                        ? [.relinquishToWriter, .accommodateDeletion]  // P17
                        : evicting
                            ? [.relinquishToWriter, .accommodateEviction]  // P33
                            : [.relinquishToWriter]  // O6
                }
            }
            if own.isEmpty { continue }
            if request.messagesContents { inside = own }

            for id in direct {
                // P3 via primary index
                builder.add(own, to: id, at: path, package: target.isPackage, records: presenters)
            }
            // Enclosing directories hear only of deletions; enclosing packages of everything.
            if !packages.isEmpty || !enclosingDirectory.isEmpty {
                for (ancestor, ids) in presenterTree.presentersAbove(path) {
                    let isPackage = packages.contains(ancestor)
                    let messages = isPackage ? enclosingPackage : enclosingDirectory
                    for id in ids {
                        builder.add(messages, to: id, at: ancestor, package: isPackage, records: presenters)
                    }
                }
            }
            if !inside.isEmpty || target.isPackage {
                // Everything inside a package is the package (C17): its inner presenters hear
                // what the package hears; inside a directory only removal concerns them.
                let messages = target.isPackage && inside.isEmpty ? own.filter { $0.deliveryRank == 0 } : inside
                for (innerPath, id) in presenterTree.presentersInside(path) {
                    builder.add(messages, to: id, at: innerPath, package: false, records: presenters)
                }
            }
        }
        return builder.deliveries.map { delivery in
            var delivery = delivery
            if let answers = presenters[delivery.presenter]?.answers, answers != .all {
                delivery.messages.removeAll { !answers.contains($0.kind) }
            }
            if request.alreadyRelinquished.contains(delivery.presenter) {
                delivery.messages.removeAll { $0.deliveryRank == 0 }  // P21
            }
            if delivery.messages.contains(.relinquishToWriter) {
                delivery.messages.removeAll { $0 == .relinquishToReader }
            }
            delivery.messages.sort { $0.deliveryRank < $1.deliveryRank }
            return delivery
        }.filter { !$0.messages.isEmpty }
    }

    /// The notifications after a grant's writes end (P9, P10, P12, P19, P20).
    func notifications(
        after record: GrantRecord, outcomes: some Sequence<IntentOutcome>
    ) -> [PresenterDelivery<PresenterNotification>] {
        notifications(by: record.identity, of: record.intents, moved: record.moved, outcomes: outcomes)
    }

    /// The notifications after `identity`'s writes of `intents` end; `moved` are the moves
    /// reported inside the grant.
    func notifications(
        by identity: CoordinatorIdentity?, of intents: some Sequence<Intent>, moved: [ItemPath],
        outcomes: some Sequence<IntentOutcome>, tellingContainers: Bool = true
    ) -> [PresenterDelivery<PresenterNotification>] {
        if presenterTree.isEmpty { return [] }
        var builder = DeliveryBuilder<PresenterNotification>(excluding: identity)
        var toldAttributes = false
        for (intent, outcome) in zip(intents, outcomes) {
            guard case .writing(let options) = intent.kind, !options.contains(.forMoving) else { continue }
            if !outcome.existedBefore && !outcome.existsAfter { continue }
            if outcome.existedBefore && outcome.existsAfter && !outcome.changed { continue }
            if moved.contains(where: { intent.path.isSameOrInside($0) }) { continue }  // told as a move
            let path = intent.path
            let target = intent.target
            let packages = target.enclosingPackages
            // chmod, chown, utimes: told as a change of attributes, which inotify's users tell
            // apart from one of contents (ATTRIB, MODIFY).
            let attributesOnly = options.contains(.contentIndependentMetadataOnly) && outcome.existedBefore
            toldAttributes = toldAttributes || attributesOnly
            let subitemNews: PresenterNotification
            switch (outcome.existedBefore, outcome.existsAfter) {
            case (false, _): subitemNews = .subitemDidAppear(path)
            case (true, true):
                subitemNews = attributesOnly ? .subitemDidChangeAttributes(path) : .subitemDidChange(path)
            case (true, false): subitemNews = .subitemWasDeleted(path)
            }
            if outcome.existedBefore && !outcome.existsAfter {
                for id in presenterTree.presenters(at: path) {
                    builder.add([.itemWasDeleted], to: id, at: path, package: target.isPackage, records: presenters)
                }
            }
            if outcome.existsAfter && (!target.isDirectory || target.isPackage) {  // P19
                for id in presenterTree.presenters(at: path) {
                    builder.add(
                        [attributesOnly ? .didChangeAttributes : .didChange], to: id, at: path,
                        package: target.isPackage,
                        records: presenters)
                }
            }
            for (ancestor, ids) in tellingContainers ? presenterTree.presentersAbove(path) : [] {  // P19: any depth
                let isPackage = packages.contains(ancestor)
                for id in ids {
                    builder.add([subitemNews], to: id, at: ancestor, package: isPackage, records: presenters)
                }
            }
        }
        if !toldAttributes { return builder.deliveries }
        // One change of an item per delivery, as before there were two kinds: a grant that wrote
        // an item's attributes and its contents (two intents) tells the change of contents alone.
        // Told both, a presenter in another process heard did-change twice (two events), and
        // one in this process once.
        var deliveries = builder.deliveries
        for index in deliveries.indices where deliveries[index].messages.count > 1 {
            let messages = deliveries[index].messages
            deliveries[index].messages.removeAll { message in
                switch message {
                case .didChangeAttributes: messages.contains(.didChange)
                case .subitemDidChangeAttributes(let path): messages.contains(.subitemDidChange(path))
                default: false
                }
            }
        }
        return deliveries
    }
}
