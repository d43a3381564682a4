// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "coordfs",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "FileCoordination", targets: ["FileCoordination"]),
        .library(name: "Coordination", targets: ["Coordination"]),
        .executable(name: "coordfs", targets: ["coordfs"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // Hosts that share a store talk to etcd through its JSON gateway.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // The etcd client's request bodies and methods are NIO's (async-http-client's own NIO).
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // https members: the CA, client certificate and key async-http-client's TLS is given.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // --cluster-key-file: item names hidden from etcd (HMAC, HKDF, AES-GCM).
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        // `make docs`: the DocC archive of the Swift API.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0")
    ],
    targets: [
        // The engine: lock table, conflicts, waiters, wait-for graph, presenter and service registries.
        // Pure Swift: no Foundation, no I/O, no C.
        .target(name: "Coordination"),
        // Linux's calls and constants that Swift's Glibc module lacks: the C for everything but libfuse.
        .target(name: "CLinux"),
        // The system calls the server, the client, the runtime and the mount share, with typed
        // errors: /proc, Unix sockets and peer credentials, descriptor passing.
        .target(
            name: "LinuxSystem",
            dependencies: ["CLinux", .product(name: "SystemPackage", package: "swift-system")]
        ),
        // The runtime over the engine: a domain of coordinators and presenters, claims, presenter
        // messaging through one path-based presenter protocol, links to other processes' servers,
        // and what the mount and the server share: a host's side of a shared store, the hooks a
        // control socket is served through.
        .target(
            name: "CoordinationRuntime",
            dependencies: [
                "Coordination", "CoordinationClient", "CoordinationWire", "LinuxSystem",
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        // Foundation-shaped public API: FileCoordinator and FilePresenter over the runtime.
        .target(
            name: "FileCoordination",
            dependencies: [
                "Coordination", "CoordinationRuntime", "LinuxSystem",
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        // The control socket's protocol: values and bytes, no I/O.
        .target(name: "CoordinationWire"),
        // The control socket: peer credentials, wire <-> engine, remote presenters.
        .target(
            name: "CoordinationServer",
            dependencies: [
                "CoordinationWire", "Coordination", "CoordinationRuntime", "LinuxSystem", "FileVersions",
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        // Connects to a mount's or the daemon's control socket.
        .target(name: "CoordinationClient", dependencies: ["CoordinationWire", "LinuxSystem"]),
        // libfuse3's low-level API: the one C boundary.
        .systemLibrary(
            name: "CFuse3", pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]),
        // libfuse 3.14's device I/O hooks (thread-locals need real C): kernel passthrough, and
        // FUSE over io_uring through liburing.
        .target(name: "CFusePassthrough", dependencies: ["CFuse3"], linkerSettings: [.linkedLibrary("uring")]),
        // Hosts that share a store: etcd's keys, leases, transactions and watches.
        .target(
            name: "CoordinationCluster",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        // Versions of a tree's items, kept inside its own filesystem, and whose reads a write is
        // stale against: what a mount keeps of content it replaces.
        .target(name: "FileVersions", dependencies: ["CLinux", "LinuxSystem", "CoordinationRuntime"]),
        // The FUSE filesystem: operations become coordinated intents. It knows nothing of the
        // control server: the commands start it (the socket before the mount is made).
        .target(
            name: "CoordFSMount",
            dependencies: [
                "CFuse3", "CFusePassthrough", "CLinux", "LinuxSystem", "Coordination", "CoordinationRuntime",
                "FileVersions",
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        // One file per subcommand.
        .target(
            name: "CoordFSCommands",
            dependencies: [
                "FileCoordination", "Coordination", "CoordinationRuntime", "CoordFSMount", "CoordinationServer",
                "CoordinationWire", "CoordinationClient",
                "LinuxSystem", "CoordinationCluster", "FileVersions",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        .executableTarget(name: "coordfs", dependencies: ["CoordFSCommands"]),
        // The control socket's fuzz target (libFuzzer: make fuzz).
        .executableTarget(
            name: "CoordFSFuzz", dependencies: ["CoordinationServer", "CoordinationWire", "CoordinationRuntime"]),
        // An Apple-style program the cross-process tests run as two processes.
        .executableTarget(name: "CoordinatedCounter", dependencies: ["FileCoordination"]),
        // An Apple-style presenter that prints what it is asked and told (the cluster tests).
        .executableTarget(name: "PresenterLog", dependencies: ["FileCoordination"]),
        .executableTarget(
            name: "CoordFSBench",
            dependencies: ["Coordination", "CoordinationRuntime", "FileCoordination"]
        ),
        // Delegations through etcd: `make bench-cluster`.
        .executableTarget(name: "CoordFSClusterBench", dependencies: ["CoordinationCluster"]),
        // Helpers the test targets share.
        .target(name: "TestSupport", dependencies: ["FileCoordination"], path: "Tests/TestSupport"),
        .testTarget(name: "CoordinationTests", dependencies: ["Coordination", "TestSupport"]),
        .testTarget(name: "LinuxSystemTests", dependencies: ["LinuxSystem"]),
        .testTarget(
            name: "CoordinationRuntimeTests", dependencies: ["CoordinationRuntime", "Coordination", "TestSupport"]),
        // A file written for Apple platforms, compiled unchanged but for the import (Swift 6 mode).
        .testTarget(name: "AppleStyleTests", dependencies: ["FileCoordination"]),
        .testTarget(name: "CoordinationWireTests", dependencies: ["CoordinationWire", "TestSupport"]),
        .testTarget(
            name: "CoordinationServerTests",
            dependencies: [
                "CoordinationServer", "CoordinationWire", "CoordinationClient", "Coordination", "CoordinationRuntime",
                "FileCoordination", "LinuxSystem", "TestSupport"
            ]
        ),
        // Real mounts, real child processes.
        .testTarget(
            name: "CoordFSIntegrationTests",
            dependencies: [
                "CoordFSMount", "CoordFSCommands", "FileCoordination", "Coordination", "CoordinationRuntime",
                "CoordinationClient",
                "CoordinationWire", "LinuxSystem", "CLinux", "TestSupport"
            ]
        ),
        // The mount's parts on their own, and the commands' (no mount made).
        .testTarget(
            name: "CoordFSMountTests",
            dependencies: [
                "CoordFSMount", "Coordination", "LinuxSystem", "CoordinationRuntime", "CLinux", "FileVersions",
                "TestSupport"
            ]),
        .testTarget(
            name: "CoordinationClientTests",
            dependencies: [
                "CoordinationClient", "CoordinationServer", "CoordinationRuntime", "CoordinationWire", "TestSupport"
            ]),
        // Against etcd servers the tests start on loopback.
        .testTarget(name: "CoordinationClusterTests", dependencies: ["CoordinationCluster", "TestSupport"]),
        .testTarget(name: "FileVersionsTests", dependencies: ["FileVersions", "CLinux"]),
        .testTarget(
            name: "CoordFSCommandsTests", dependencies: ["CoordFSCommands", "CoordinationWire", "CoordFSMount"]),
        .testTarget(
            name: "FileCoordinationTests",
            dependencies: ["FileCoordination", "CoordinationRuntime", "Coordination", "TestSupport"]
        )
    ]
)
