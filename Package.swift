// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "EntityStore",
    products: [
        .library(name: "EntityStore", targets: ["EntityStore"]),
        .library(name: "LMDB", targets: ["LMDB"]),
        .library(name: "SectionedDiff", targets: ["SectionedDiff"]),
        .library(name: "EntityStoreSync", targets: ["EntityStoreSync"]),
        // store-inspect's commands as a library (the benchmarks time its import and export in process).
        .library(name: "StoreInspectCore", targets: ["StoreInspectCore"]),
        .executable(name: "store-inspect", targets: ["store-inspect"]),
        .executable(name: "store-demo", targets: ["store-demo"]),
    ],
    targets: [
        // The C library, reached through a tiny system-library target.
        .systemLibrary(
            name: "CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        // The safe Swift layer over LMDB's C API; the only module that imports CLMDB.
        .target(name: "LMDB", dependencies: ["CLMDB"]),
        // Pure algorithm: old vs new sectioned lists -> a change set. Knows nothing of storage.
        .target(name: "SectionedDiff"),
        .target(name: "EntityStore", dependencies: ["LMDB", "SectionedDiff"]),
        // Sync through PostgreSQL: libpq through a system-library target, kept out of the core library.
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        .target(name: "EntityStoreSync", dependencies: ["EntityStore", "LMDB", "CLibPQ"]),

        // The CLI's parser and commands, a library so that tests and the fuzzer reach them.
        .target(
            name: "StoreInspectCore", dependencies: ["EntityStore", "EntityStoreSync", "LMDB"],
            path: "Tools/StoreInspectCore"),
        .executableTarget(name: "store-inspect", dependencies: ["StoreInspectCore"], path: "Tools/store-inspect"),
        .executableTarget(name: "store-demo", dependencies: ["EntityStore"], path: "Tools/store-demo"),

        // Test-only support: temporary stores, process helpers, the strict batch validator.
        .target(
            name: "TestSupport", dependencies: ["LMDB", "SectionedDiff", "EntityStore"], path: "Tests/TestSupport"),
        // A helper executable the tests start as a real second process.
        .executableTarget(
            name: "es-test-helper", dependencies: ["LMDB", "EntityStore", "TestSupport"], path: "Tests/TestHelper"),

        // The sync tests' worker, started as several real processes syncing one server.
        .executableTarget(
            name: "es-sync-helper", dependencies: ["EntityStore", "EntityStoreSync", "TestSupport"],
            path: "Tests/SyncHelper"),
        .testTarget(
            name: "SyncTests",
            dependencies: [
                "EntityStore", "EntityStoreSync", "LMDB", "TestSupport", "es-sync-helper", "store-inspect",
            ]),
        .testTarget(name: "LMDBTests", dependencies: ["LMDB", "TestSupport", "es-test-helper"]),
        .testTarget(name: "SectionedDiffTests", dependencies: ["SectionedDiff", "TestSupport"]),
        .testTarget(name: "EntityStoreTests", dependencies: ["EntityStore", "LMDB", "TestSupport", "es-test-helper"]),
        .testTarget(name: "DemoTests", dependencies: ["TestSupport", "store-demo"]),
        .testTarget(
            name: "ReliabilityTests",
            dependencies: ["EntityStore", "LMDB", "TestSupport", "es-test-helper", "store-inspect"]),
        .testTarget(
            name: "StoreInspectTests",
            dependencies: ["StoreInspectCore", "EntityStore", "TestSupport", "store-inspect", "es-test-helper"]),
    ]
)
