import Logging

extension Logger {
  /// GroupSync's logger: errors in change-set files, resets, skipped
  /// listeners. Configure the backend with `LoggingSystem.bootstrap`.
  static let groupSync = Logger(label: "groupsync")
}
