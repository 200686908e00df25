import ArgumentParser
import GroupSync

/// `--store NAME`: which store of the group a command works on.
struct StoreOption: ParsableArguments {
  @Option(name: .long, help: "The store of the group (default: main).")
  var store: String = "main"

  /// The store of `group` this option names.
  func store(of group: GroupFolder) throws -> Store {
    try group.store(named: store)
  }
}
