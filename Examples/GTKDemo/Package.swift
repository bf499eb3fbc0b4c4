// swift-tools-version:6.2
import PackageDescription

// A GTK 4 app whose list follows a FetchedResultsController (issue #78). A package of its own, so that the library
// keeps no GTK dependency: `make gtk-demo` installs GTK and runs it, `make gtk-test` runs its scripted checks under Xvfb.
let package = Package(
    name: "EntityStoreGTKDemo",
    dependencies: [.package(name: "EntityStore", path: "../..")],
    targets: [
        .systemLibrary(name: "CGtk", pkgConfig: "gtk4", providers: [.apt(["libgtk-4-dev"])]),
        // The GObject types (a row item, the GListModel over the flat list), the row factory, and the main
        // dispatch queue drained from GLib's main loop: C, as GObject types are written.
        .target(name: "GtkSupport", dependencies: ["CGtk"]),
        .executableTarget(
            name: "entitystore-gtk",
            dependencies: ["CGtk", "GtkSupport", .product(name: "EntityStore", package: "EntityStore")]),
    ]
)
