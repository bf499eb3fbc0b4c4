// swift-tools-version:6.0
import PackageDescription

// The side-by-side benchmark suite: EntityStore, raw LMDB (through our LMDB module and through the C API) and
// SQLite on the same data, in one run. `make bench` builds it in release.
let package = Package(
    name: "EntityStoreBenchmarks",
    dependencies: [.package(name: "EntityStore", path: "..")],
    targets: [
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLMDBRaw", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .target(name: "CHeapStats"),
        .executableTarget(
            name: "entitystore-bench",
            dependencies: [
                "CSQLite", "CLMDBRaw", "CHeapStats",
                .product(name: "EntityStore", package: "EntityStore"),
                .product(name: "LMDB", package: "EntityStore"),
                .product(name: "EntityStoreSync", package: "EntityStore"),
                .product(name: "StoreInspectCore", package: "EntityStore"),
            ],
            swiftSettings: [.unsafeFlags(["-Ounchecked"])]),
    ]
)
