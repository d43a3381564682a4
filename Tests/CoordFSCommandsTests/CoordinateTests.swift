@testable import CoordFSCommands
import Testing

/// flock's forms, as `coordfs coordinate` parses them.
@Suite struct CoordinateTests {
    @Test func aNumberAloneIsTheDescriptorForm() throws {
        #expect(try Coordinate.parse(["-x", "9"]).descriptor == 9)
        #expect(try Coordinate.parse(["-s", "12"]).descriptor == 12)
        // A command, two items or a name: the usual form.
        #expect(try Coordinate.parse(["-x", "9", "--", "true"]).descriptor == nil)
        #expect(try Coordinate.parse(["-x", "9", "-x", "10", "-c", "true"]).descriptor == nil)
        #expect(try Coordinate.parse(["-x", "9a", "-c", "true"]).descriptor == nil)
        #expect(throws: (any Error).self) { try Coordinate.parse(["-x", "file"]) }
    }

    @Test func closeLeavesTheCommandOutOfTheHold() throws {
        #expect(try Coordinate.parse(["-o", "-x", "f", "--", "true"]).close)
        #expect(try !Coordinate.parse(["-x", "f", "--", "true"]).close)
    }
}
