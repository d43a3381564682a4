import Coordination
import Dispatch
import FileCoordination
import Foundation
import Synchronization
import TestSupport
import Testing

/// The Q rules: operations and queues.
@Suite struct QueueRules {
    @Test("Q1 the async accessor runs on the given queue") func q1() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let queue = OperationQueue()
        queue.name = "q1"
        let done = Gate()
        let log = fx.log
        fx.coordinator().coordinate(with: [.readingIntent(with: a), .writingIntent(with: fx.url("b"))], queue: queue) {
            error in
            log.add(OperationQueue.current === queue && error == nil ? "on-queue" : "elsewhere")
            done.open()
        }
        done.wait()
        #expect(log.events == ["on-queue"])
    }

    @Test("Q2 an operation is not ready until its dependencies finish, cancelled or not") func q2() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let log = fx.log
        let first = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.writingIntent(with: a)]) { _ in
            log.add("first")
        }
        let second = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) {
            _ in log.add("second")
        }
        second.addDependency(first)
        #expect(!second.isReady)
        let queue = OperationQueue()
        queue.addOperations([second, first], waitUntilFinished: true)
        #expect(log.events == ["first", "second"])

        let cancelledDependency = BlockOperation { log.add("never") }
        let dependent = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) {
            _ in log.add("dependent")
        }
        dependent.addDependency(cancelledDependency)
        cancelledDependency.cancel()
        queue.addOperations([dependent, cancelledDependency], waitUntilFinished: true)
        #expect(log.contains("dependent") && !log.contains("never"))
    }

    @Test("Q3 cancelled before it starts or while waiting, an operation finishes without its work") func q3() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let log = fx.log
        let early = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) { _ in
            log.add("early")
        }
        early.cancel()
        let queue = OperationQueue()
        queue.addOperations([early], waitUntilFinished: true)
        #expect(early.isFinished && !log.contains("early"))
        #expect(early.error?.isCoordinationCancellation == true)

        // Waiting on a dependency: cancelling makes it ready at once.
        let blocker = BlockOperation {}
        let dependent = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) {
            _ in log.add("dependent")
        }
        dependent.addDependency(blocker)
        #expect(!dependent.isReady)
        dependent.cancel()
        #expect(dependent.isReady)
        queue.addOperations([dependent], waitUntilFinished: true)
        #expect(!log.contains("dependent"))

        // Waiting for access: cancelling ends the wait without running the accessor.
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let waiting = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) {
            _ in log.add("waiting")
        }
        queue.addOperation(waiting)
        #expect(fx.waitForWaiters(1))
        waiting.cancel()
        queue.waitUntilAllOperationsAreFinished()
        #expect(waiting.isFinished && !log.contains("waiting"))
        #expect(waiting.error?.isCoordinationCancellation == true)
        try holder.release()
        #expect(fx.isIdle)
    }

    @Test("Q4 an operation executes from start until its work is done, then is finished") func q4() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let op = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) { _ in }
        #expect(!op.isExecuting && !op.isFinished)
        let queue = OperationQueue()
        queue.addOperation(op)
        #expect(fx.waitForWaiters(1))
        #expect(op.isExecuting && !op.isFinished, "waiting counts as executing")
        try holder.release()
        queue.waitUntilAllOperationsAreFinished()
        #expect(!op.isExecuting && op.isFinished && op.error == nil)

        let cancelled = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) {
            _ in
        }
        cancelled.cancel()
        queue.addOperations([cancelled], waitUntilFinished: true)
        #expect(!cancelled.isExecuting && cancelled.isFinished)
    }

    @Test("Q5 cancellation is cooperative: running work checks it and stops early") func q5() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let started = Gate()
        let log = fx.log
        var op: CoordinatedAccessOperation!
        op = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.writingIntent(with: a)]) { _ in
            started.open()
            var steps = 0
            while !op.isCancelled && steps < 2_000 { usleep(1_000); steps += 1 }
            log.add(op.isCancelled ? "stopped early" : "ran to the end")
        }
        let queue = OperationQueue()
        queue.addOperation(op)
        started.wait()
        op.cancel()
        queue.waitUntilAllOperationsAreFinished()
        #expect(log.events == ["stopped early"])
        #expect(fx.isIdle)
    }

    @Test("Q6 operation state is safe to read and change from any thread") func q6() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let ops = (0..<64).map { _ in
            CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.writingIntent(with: a)]) { _ in
                usleep(200)
            }
        }
        queue.addOperations(ops, waitUntilFinished: false)
        DispatchQueue.concurrentPerform(iterations: 64) { index in
            let op = ops[index]
            _ = (op.isReady, op.isExecuting, op.isFinished, op.isCancelled)
            if index % 3 == 0 { op.cancel() }
            _ = op.error
        }
        queue.waitUntilAllOperationsAreFinished()
        #expect(ops.allSatisfy { $0.isFinished && !$0.isExecuting })
        #expect(ops.enumerated().allSatisfy { $0.offset % 3 != 0 || $0.element.isCancelled })
        #expect(fx.isIdle)
    }

    @Test("Q7 a queue limited to one operation runs accessors one at a time") func q7() throws {
        let fx = try Fixture()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let tally = Mutex((running: 0, peak: 0, count: 0))
        let files = try (0..<8).map { try fx.file("f\($0)") }  // distinct items: only the queue serialises
        let group = DispatchGroup()
        for file in files {
            group.enter()
            fx.coordinator().coordinate(with: [.readingIntent(with: file)], queue: queue) { _ in
                tally.withLock {
                    $0.running += 1; $0.peak = max($0.peak, $0.running)
                }
                usleep(5_000)
                tally.withLock {
                    $0.running -= 1; $0.count += 1
                }
                group.leave()
            }
        }
        group.wait()
        #expect(tally.withLock { $0.peak == 1 && $0.count == 8 })
    }

    @Test("Q8 the OperationQueue behaviours Linux once got wrong") func q8() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let log = fx.log
        // waitUntilAllOperationsAreFinished includes asynchronous operations.
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let queue = OperationQueue()
        let async = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) { _ in
            log.add("async")
        }
        queue.addOperation(async)
        #expect(fx.waitForWaiters(1))
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { try? holder.release() }
        queue.waitUntilAllOperationsAreFinished()
        #expect(log.contains("async"), "waited for the asynchronous operation")
        // Dependents of a cancelled operation run.
        let cancelled = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.readingIntent(with: a)]) {
            _ in
        }
        let after = BlockOperation { log.add("after-cancelled") }
        after.addDependency(cancelled)
        cancelled.cancel()
        queue.addOperations([cancelled, after], waitUntilFinished: true)
        #expect(log.contains("after-cancelled"))
        // Dependencies on a serial queue do not deadlock, including on a later-added operation.
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let early = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.writingIntent(with: a)]) { _ in
            log.add("early")
        }
        let late = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.writingIntent(with: a)]) { _ in
            log.add("late")
        }
        early.addDependency(late)
        serial.addOperation(early)
        serial.addOperation(late)
        let finished = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            serial.waitUntilAllOperationsAreFinished(); finished.signal()
        }
        #expect(finished.wait(timeout: .now() + 10) == .success)
        #expect(log.order("late", before: "early"))
    }
}
