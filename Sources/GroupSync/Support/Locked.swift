#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a `pthread_mutex_t`, with the shape of
/// `Synchronization.Mutex` (`withLock`).
///
/// Why not `Mutex`: on Linux its lock is a futex ThreadSanitizer cannot
/// see, so every access it guards is reported as a data race; a pthread
/// mutex is intercepted, and `make test-tsan` reports only real races.
/// `@unchecked Sendable`: the value is only reached under the mutex.
final class Locked<Value>: @unchecked Sendable {
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  private var value: Value

  init(_ value: Value) {
    self.value = value
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    pthread_mutex_init(mutex, nil)
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
  }

  /// Runs `body` with the value, under the mutex; never call it again from
  /// inside `body`.
  @discardableResult
  func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&value)
  }
}
