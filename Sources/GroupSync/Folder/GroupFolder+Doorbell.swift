extension GroupFolder {
  /// Calls `ring` on each commit to the group's stores, from any process,
  /// without reading the change sets (see ``Doorbell``).
  ///
  /// For example, to wake a loop that reads the history itself:
  ///
  /// ```swift
  /// let doorbell = try group.doorbell { wake.ring() }
  /// defer { doorbell.close() }
  /// ```
  ///
  /// - Parameters:
  ///   - rescanInterval: how often the inbox is looked at besides the
  ///     kernel's wake-ups, which it may drop.
  ///   - ignoringAuthor: this process's own commits written under this
  ///     author do not ring (a relay's own applied entries and
  ///     bookkeeping, say). Other processes' commits always ring: their
  ///     author is not read.
  ///   - ring: called on the watcher thread (for this process's own
  ///     commits, on the committing thread); keep it short.
  /// - Returns: the doorbell; it rings until it is closed or released.
  public func doorbell(
    rescanInterval: Duration = .seconds(1), ignoringAuthor: String? = nil, _ ring: @escaping @Sendable () -> Void
  ) throws -> Doorbell {
    let doorbell = try Doorbell(
      root: root, group: layout.root, name: Self.ephemeralName(), rescanInterval: rescanInterval,
      ignoredAuthor: ignoringAuthor, ring: ring)
    removeDeadEphemeralListeners()
    return doorbell
  }
}
