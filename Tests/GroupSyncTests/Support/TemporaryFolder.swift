import Foundation
import GroupSyncTestSupport
@testable import GroupSync

/// A fresh folder under the system temp folder, removed when released.
final class TemporaryFolder: @unchecked Sendable {
  let path: String

  init(_ label: String = #function) throws {
    let safe = label.filter { $0.isLetter || $0.isNumber }.prefix(40)
    path = ScratchFolder.unique("gs-test-\(safe)")
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  }

  func child(_ name: String) -> String { path + "/" + name }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// What the listener suites share: a table of items, an insert, and
/// options that turn gaps into history reads or resets quickly.
enum ListenerFixture {
  static let schema = "CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL DEFAULT '');"
  static let insert = ["INSERT INTO items(body) VALUES ('x')"]

  static var options: ListenerOptions {
    var options = ListenerOptions()
    options.gracePeriod = .milliseconds(200)
    options.rescanInterval = .milliseconds(200)
    return options
  }
}
