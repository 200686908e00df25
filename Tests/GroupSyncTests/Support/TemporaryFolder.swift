import Foundation

/// A fresh folder under the system temp folder, removed when released.
final class TemporaryFolder: @unchecked Sendable {
  let path: String

  init(_ label: String = #function) throws {
    let safe = label.filter { $0.isLetter || $0.isNumber }.prefix(40)
    path = FileManager.default.temporaryDirectory
      .appendingPathComponent("gs-test-\(safe)-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  }

  func child(_ name: String) -> String { path + "/" + name }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}
