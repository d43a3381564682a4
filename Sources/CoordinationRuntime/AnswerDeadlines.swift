import Dispatch
import Foundation

// @unchecked Sendable: the queue and the timer are behind `lock`.
/// When the presenters' answers to each access's requests are due, for all of a domain's
/// messengers, on one timer (X2).
///
/// A timer per request (`asyncAfter`) would wake libdispatch's manager thread for every request,
/// to put the new timer in its heap. With one presenter timeout for all, deadlines come in the
/// order the requests were sent, so they queue in order and the timer is set for the earliest
/// only; one answered is taken off the queue. While requests keep coming and being answered,
/// the timer fires about once per timeout, finds nothing late, and is set again.
final class AnswerDeadlines: @unchecked Sendable {
    typealias Token = UInt64

    private struct Due {
        let token: Token
        let at: DispatchTime
    }

    private let lock = NSLock()
    /// In the order of `at` from `head` on; entries before `head` are spent.
    private var queue: [Due] = []
    private var head = 0
    /// The messengers still waiting, by token: one answered or timed out leaves at once, so a
    /// late one at the head of `queue` keeps only its successors' tokens, not their messengers.
    private var waiting: [Token: PresenterMessenger] = [:]
    private var lastToken: Token = 0
    private var timer: DispatchSourceTimer?
    /// The deadline the timer is set for; nil while it is not set.
    private var armedFor: DispatchTime?

    deinit { timer?.cancel() }

    /// Calls `messenger.timeOut` at `at` unless `answered` is called with the token first.
    func add(_ messenger: PresenterMessenger, due at: DispatchTime) -> Token {
        lock.withLock {
            lastToken += 1
            let due = Due(token: lastToken, at: at)
            if let last = queue.last, last.at > at, head < queue.count {
                // A shorter timeout set since: keep the queue in order.
                let index = queue[head...].firstIndex { $0.at > at } ?? queue.count
                queue.insert(due, at: index)
            } else {
                queue.append(due)
            }
            waiting[due.token] = messenger
            if armedFor.map({ at < $0 }) ?? true { arm(for: at) }
            return due.token
        }
    }

    /// The messenger of `token` needs no deadline any more.
    func answered(_ token: Token) {
        lock.withLock {
            waiting[token] = nil
            dropSpent()
        }
    }

    private func arm(for at: DispatchTime) {
        let timer = self.timer ?? makeTimer()
        // A late answer gets a few milliseconds more; the timer need not fire on the dot.
        timer.schedule(deadline: at, leeway: .milliseconds(10))
        armedFor = at
    }

    private func makeTimer() -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "org.coordfs.answer-deadlines"))
        timer.setEventHandler { [weak self] in self?.fire() }
        timer.resume()
        self.timer = timer
        return timer
    }

    private func fire() {
        let now = DispatchTime.now()
        let late: [PresenterMessenger] = lock.withLock {
            armedFor = nil
            var late: [PresenterMessenger] = []
            while head < queue.count, queue[head].at <= now {
                if let messenger = waiting.removeValue(forKey: queue[head].token) { late.append(messenger) }
                head += 1
            }
            dropSpent()
            if head < queue.count { arm(for: queue[head].at) }
            return late
        }
        for messenger in late { messenger.timeOut() }
    }

    /// Moves `head` past deadlines whose messengers left, and lets the spent part go.
    private func dropSpent() {
        while head < queue.count, waiting[queue[head].token] == nil { head += 1 }
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1024 && head * 2 >= queue.count {
            queue.removeFirst(head)
            head = 0
        }
    }
}
