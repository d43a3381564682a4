import CoordinationClient
import CoordinationWire
import Foundation

/// `coordfs status --mounts`: the coordfs mounts, one a line, as findmnt lists mounts; each
/// asked through its control socket for its daemon and how much it serves now.
extension Status {
    /// A column of the mounts' table, and the key of its value in a `--json` line.
    enum MountColumn: String, CaseIterable {
        case target = "TARGET", source = "SOURCE", pid = "PID", holders = "HOLDERS", waiters = "WAITERS",
            presenters = "PRESENTERS", services = "SERVICES", open = "OPEN", socket = "SOCKET"

        var key: String { self == .open ? "open_files" : rawValue.lowercased() }
    }

    /// Every coordfs mount, as a table (or JSON Lines); one that cannot be asked is listed with
    /// what mountinfo says of it, and a `warning:` line on standard error says why.
    func listMounts() throws {
        var lines: [[String: WireValue]] = []
        for mount in MountTable.coordfsMounts(in: MountTable.entries()) {
            var fields: [String: WireValue] = ["target": .string(mount.mountPoint)]
            if let backing = mount.backing { fields["source"] = .string(backing) }
            if let socket = ControlClient.mountSocketPath(for: mount.mountPoint),
                let client = try? ControlClient(socketPath: socket)
            {
                defer { client.close() }
                fields["socket"] = .string(socket)
                if case .int(let pid)? = client.server["pid"] { fields["pid"] = .int(pid) }
                // Counted by the server: a page of one entry a list says how many there are.
                if let status = try? client.request({ .status(id: $0, page: StatusPage(limit: 1)) }),
                    case .object(let totals)? = status["totals"]
                {
                    for key in StatusPage.List.allCases.map(\.rawValue) { fields[key] = totals[key] }
                }
                if let open = Self.statistics(ofMountAt: mount.mountPoint)?["open_files"] as? Int {
                    fields["open_files"] = .int(open)
                }
            } else {
                FileHandle.standardError.write(Data("warning: \(Self.whyUnasked(mount.mountPoint))\n".utf8))
            }
            lines.append(fields)
        }
        if json {
            for fields in lines { print(String(decoding: WireCodec.encode(object: fields).dropLast(), as: UTF8.self)) }
            return
        }
        var table = lines.map { fields in
            MountColumn.allCases.map { column -> String in
                switch fields[column.key] {
                case .string(let text)?: text
                case .int(let number)?: String(number)
                default: "-"
                }
            }
        }
        if !noHeadings { table.insert(MountColumn.allCases.map(\.rawValue), at: 0) }
        if raw {
            for row in table { print(row.map(Self.rawValue).joined(separator: " ")) }
            return
        }
        let widths = MountColumn.allCases.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
        for row in table {
            print(
                row.enumerated().map { $0.element.padding(toLength: widths[$0.offset], withPad: " ", startingAt: 0) }
                    .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }
}
