import Foundation

// etcd v3's messages as its JSON gateway (etcd 3.4) spells them: keys and values in base64,
// 64-bit integers as strings, and fields equal to zero, false or empty left out, so every
// field decodes as optional (notes/etcd-gateway.md: what the gateway was seen to do).

/// A 64-bit integer the gateway writes as a JSON string (revisions, lease ids, TTLs): lease ids
/// lie beyond a double's exact range.
struct EtcdInteger: Codable, Sendable, Hashable {
    let value: Int64

    init(_ value: Int64) { self.value = value }

    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self), let value = Int64(text) {
            self.value = value
        } else {
            value = try container.decode(Int64.self)
        }
    }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(String(value))
    }
}

/// Bytes the gateway carries as standard base64 with padding.
struct EtcdBytes: Codable, Sendable, Hashable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }
    init(_ text: String) { bytes = Array(text.utf8) }

    init(from decoder: Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let data = Data(base64Encoded: text) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "not base64: \(text)"))
        }
        bytes = Array(data)
    }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Data(bytes).base64EncodedString())
    }
}

struct EtcdHeader: Decodable, Sendable {
    var revision: EtcdInteger?
}

struct EtcdKeyValueMessage: Decodable, Sendable {
    var key: EtcdBytes
    var value: EtcdBytes?
    var create_revision: EtcdInteger?
    var mod_revision: EtcdInteger?
    var version: EtcdInteger?
    var lease: EtcdInteger?
}

struct EtcdRangeRequest: Encodable, Sendable {
    var key: EtcdBytes
    var range_end: EtcdBytes?
    var limit: EtcdInteger?
    var revision: EtcdInteger?
    var keys_only: Bool?
    var serializable: Bool?
}

struct EtcdRangeResponse: Decodable, Sendable {
    var header: EtcdHeader?
    var kvs: [EtcdKeyValueMessage]?
    var more: Bool?
    var count: EtcdInteger?
}

struct EtcdPutRequest: Encodable, Sendable {
    var key: EtcdBytes
    var value: EtcdBytes
    var lease: EtcdInteger?
    var prev_kv: Bool?
}

struct EtcdPutResponse: Decodable, Sendable {
    var header: EtcdHeader?
    var prev_kv: EtcdKeyValueMessage?
}

struct EtcdDeleteRequest: Encodable, Sendable {
    var key: EtcdBytes
    var range_end: EtcdBytes?
    var prev_kv: Bool?
}

struct EtcdDeleteResponse: Decodable, Sendable {
    var header: EtcdHeader?
    var deleted: EtcdInteger?
    var prev_kvs: [EtcdKeyValueMessage]?
}

struct EtcdCompareMessage: Encodable, Sendable {
    var key: EtcdBytes
    var target: String
    var result: String
    var create_revision: EtcdInteger?
}

struct EtcdRequestOp: Encodable, Sendable {
    var request_range: EtcdRangeRequest?
    var request_put: EtcdPutRequest?
    var request_delete_range: EtcdDeleteRequest?
}

struct EtcdTxnRequest: Encodable, Sendable {
    var compare: [EtcdCompareMessage]
    var success: [EtcdRequestOp]
    var failure: [EtcdRequestOp]
}

struct EtcdResponseOp: Decodable, Sendable {
    var response_range: EtcdRangeResponse?
    var response_put: EtcdPutResponse?
    var response_delete_range: EtcdDeleteResponse?
}

struct EtcdTxnResponse: Decodable, Sendable {
    var header: EtcdHeader?
    var succeeded: Bool?
    var responses: [EtcdResponseOp]?
}

struct EtcdLeaseGrantRequest: Encodable, Sendable {
    var TTL: EtcdInteger
    var ID: EtcdInteger?
}

struct EtcdLeaseGrantResponse: Decodable, Sendable {
    var header: EtcdHeader?
    var ID: EtcdInteger?
    var TTL: EtcdInteger?
    var error: String?
}

struct EtcdLeaseIDRequest: Encodable, Sendable {
    var ID: EtcdInteger
}

struct EtcdLeaseKeepAliveResponse: Decodable, Sendable {
    struct Result: Decodable, Sendable {
        var header: EtcdHeader?
        var ID: EtcdInteger?
        var TTL: EtcdInteger?
    }
    var result: Result?
    /// The stream's error instead of a result (no leader, a member stopping).
    var error: EtcdStreamError?
}

struct EtcdLeaseTimeToLiveResponse: Decodable, Sendable {
    var header: EtcdHeader?
    var ID: EtcdInteger?
    /// Seconds left; -1 when the lease is not there.
    var TTL: EtcdInteger?
    var grantedTTL: EtcdInteger?
}

struct EtcdStreamError: Decodable, Sendable {
    var grpc_code: Int?
    var message: String?
}

struct EtcdWatchCreate: Encodable, Sendable {
    var key: EtcdBytes
    var range_end: EtcdBytes?
    var start_revision: EtcdInteger?
    var prev_kv: Bool?
    var progress_notify: Bool?
}

struct EtcdWatchRequest: Encodable, Sendable {
    var create_request: EtcdWatchCreate
}

struct EtcdWatchLine: Decodable, Sendable {
    struct Event: Decodable, Sendable {
        var type: String?
        var kv: EtcdKeyValueMessage
        var prev_kv: EtcdKeyValueMessage?
    }
    struct Result: Decodable, Sendable {
        var header: EtcdHeader?
        var created: Bool?
        var canceled: Bool?
        /// Why a watch was canceled (a token refused as it was made, say).
        var cancel_reason: String?
        var compact_revision: EtcdInteger?
        var events: [Event]?
    }
    struct StreamError: Decodable, Sendable {
        var grpc_code: Int?
        var message: String?
    }
    var result: Result?
    var error: StreamError?
}

/// The body of a unary call that failed.
struct EtcdErrorBody: Decodable, Sendable {
    var error: String?
    var message: String?
    var code: Int?
}
