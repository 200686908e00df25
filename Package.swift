// swift-tools-version: 6.1
import PackageDescription

let package = Package(
  name: "GroupSync",
  products: [
    .library(name: "GroupSync", targets: ["GroupSync"]),
    // The same library as a shared object, for `make lib` and `make install`.
    .library(name: "GroupSyncShared", type: .dynamic, targets: ["GroupSync"]),
    .executable(name: "groupsync", targets: ["groupsync"]),
    // Listeners, durable consumers and the GRDB relay as swift-service-lifecycle
    // services: a product of its own, so the core library's users don't build it.
    .library(name: "GroupSyncServices", targets: ["GroupSyncServices"]),
    // The bridge between hosts through PostgreSQL (libpq): a product of its
    // own, so that the core library and `groupsync` never link libpq.
    .library(name: "GroupSyncRelay", targets: ["GroupSyncRelay"]),
    .executable(name: "groupsync-relay", targets: ["groupsync-relay"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
    .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
  ],
  targets: [
    .target(
      name: "CGroupSync",
      path: "CSupport",
      cSettings: [.define("_GNU_SOURCE")],
      linkerSettings: [.linkedLibrary("sqlite3"), .linkedLibrary("uv")]
    ),
    .target(
      name: "GroupSync",
      dependencies: [
        "CGroupSync",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "Metrics", package: "swift-metrics"),
      ]
    ),
    .target(
      name: "GroupSyncServices",
      dependencies: [
        "GroupSync",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
      ]
    ),
    // libpq, for the relay only: found through pkg-config (libpq.pc);
    // SwiftPM names the package to install when it is missing.
    .systemLibrary(
      name: "CLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq",
      providers: [.apt(["libpq-dev", "pkg-config"])]),
    .target(
      name: "GroupSyncRelay",
      dependencies: [
        "GroupSync",
        "CLibPQ",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "Metrics", package: "swift-metrics"),
      ]
    ),
    .executableTarget(
      name: "groupsync-relay",
      dependencies: [
        "GroupSync",
        "GroupSyncRelay",
        "GroupSyncRelayMetricsFile",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Metrics", package: "swift-metrics"),
        .product(name: "Prometheus", package: "swift-prometheus"),
      ]
    ),
    // The relay process's --metrics-file, through swift-prometheus: in no
    // product, so the relay library's users bring their own backend.
    .target(
      name: "GroupSyncRelayMetricsFile",
      dependencies: [.product(name: "Prometheus", package: "swift-prometheus")]
    ),
    // Child processes for the demo, the benchmark and the tests; in no product.
    .target(name: "GroupSyncProcess"),
    .executableTarget(
      name: "groupsync",
      dependencies: [
        "GroupSync",
        "GroupSyncProcess",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    // The benchmarks: kept out of every product, so `make install` ships none.
    .executableTarget(
      name: "groupsync-bench",
      dependencies: [
        "GroupSync",
        "GroupSyncRelay",
        "CGroupSync",
        "GroupSyncProcess",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ],
      path: "Benchmarks/groupsync-bench"
    ),
    // What both test targets share: the trait that times each test case.
    .target(name: "GroupSyncTestSupport", path: "Tests/GroupSyncTestSupport"),
    .testTarget(
      name: "GroupSyncTests",
      dependencies: [
        "GroupSync",
        "GroupSyncTestSupport",
        "GroupSyncServices",
        "CGroupSync",
        "GroupSyncProcess",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "MetricsTestKit", package: "swift-metrics"),
        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        .product(name: "UnixSignals", package: "swift-service-lifecycle"),
      ]
    ),
    // The relay across hosts, against a throw-away PostgreSQL server.
    .testTarget(
      name: "GroupSyncRelayTests",
      dependencies: [
        "GroupSync", "GroupSyncRelay", "GroupSyncProcess", "GroupSyncTestSupport", "CLibPQ",
        .product(name: "GRDB", package: "GRDB.swift"),
        .product(name: "MetricsTestKit", package: "swift-metrics"),
      ]
    ),
  ],
  swiftLanguageModes: [.v6]
)
