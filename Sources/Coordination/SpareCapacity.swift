extension Dictionary {
    /// Gives back the storage of a table that grew for a crowd and is nearly empty again. A Swift
    /// dictionary keeps its capacity as entries go, so a burst of watches (tens of thousands,
    /// another user's among them) would keep its memory for the daemon's life. Once a table of
    /// some size is an eighth full it is rebuilt at twice its count: the copy costs no more than
    /// the removals that emptied it.
    package mutating func releaseSpareCapacity() {
        guard capacity >= 1024, count <= capacity / 8 else { return }
        var smaller = Self(minimumCapacity: count * 2)
        for (key, value) in self { smaller[key] = value }
        self = smaller
    }
}
