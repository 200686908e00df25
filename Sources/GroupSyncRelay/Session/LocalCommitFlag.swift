// Whether a local commit rang since the relay's thread last looked.
import Foundation

/// Whether a local commit rang since the relay's thread last looked: set
/// by the doorbell's thread, taken by the relay's.
final class LocalCommitFlag: @unchecked Sendable {
  private let lock = NSLock()
  private var raised = true

  func raise() { lock.withLock { raised = true } }

  /// Whether it was raised; lowers it.
  func take() -> Bool {
    lock.withLock {
      defer { raised = false }
      return raised
    }
  }
}

