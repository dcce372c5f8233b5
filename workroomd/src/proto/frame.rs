//! The byte-level codec: `kind: u8 | stream: u32 BE | length: u32 BE | payload`.
//!
//! The decoder is the one place where bytes from the other side decide how
//! much memory we hold, so it is written to a budget: it never owns more than
//! [`MAX_FRAME`] bytes, whatever the input. A header is checked (known kind,
//! length within [`MAX_PAYLOAD`]) as soon as its nine bytes are in, before a
//! byte of room is made for the payload. "Not enough bytes yet" is
//! `Ok(None)`, not an error (mini-redis' framing).
//!
//! Plain `Vec<u8>` rather than `bytes::BytesMut`: the library stays small and
//! the copy out of the read buffer (one per frame) is cheap next to the pipe
//! `docker exec` puts between the two sides.

use std::fmt;

use thiserror::Error;

use super::message::Reason;

/// The first bytes each side writes, so a peer that is not workroom (a shell
/// printing a banner, an old relay, the wrong binary) is named as such instead
/// of being parsed as frames.
pub const MAGIC: [u8; 8] = *b"WORKROOM";

/// Bytes in a frame header: kind (1), stream id (4), payload length (4).
pub const HEADER_LEN: usize = 9;

/// The largest payload one frame may carry: 256 KiB.
///
/// It bounds what a decoder may ever buffer for one connection, so a corrupt
/// or hostile length field cannot make either side allocate gigabytes. It is
/// the data chunk senders use (`MAX_DATA_CHUNK`) and above the largest JSON message we expect (a
/// `users` reply for an image with a few thousand accounts is ~200 KiB).
/// Bigger frames would only hold the shared connection longer per frame, which
/// is latency for every interactive pane behind a bulk transfer.
pub const MAX_PAYLOAD: usize = 256 * 1024;

/// Reset and refuse messages are cut to this many bytes, so that a long error
/// text can never make the frame that reports it too large to send.
const MAX_REASON: usize = 4 * 1024;

/// The most bytes a [`Decoder`] ever owns: one whole frame of the largest size.
pub const MAX_FRAME: usize = HEADER_LEN + MAX_PAYLOAD;

/// The decoder's first buffer. Most frames are small (control messages,
/// keystrokes), so an idle connection costs 16 KiB, not [`MAX_FRAME`]; bulk
/// transfers grow it by doubling up to [`MAX_FRAME`].
const INITIAL_BUFFER: usize = 16 * 1024;

/// What a frame means. The byte values are the protocol: never renumber them,
/// add new kinds (and bump `PROTOCOL`) instead. Zero is not a kind, so a run
/// of zeroed memory is refused rather than read as frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Stream 0. JSON [`Hello`](super::Hello): the first frame each side sends.
    Hello = 1,
    /// Stream 0. JSON [`Reason`](super::Reason): the daemon will not talk to
    /// this host (protocol mismatch); the connection closes after it.
    Refuse = 2,
    /// JSON [`Request`](super::Request): opens the stream named in the header.
    Open = 3,
    /// JSON [`Response`](super::Response): the first answer to an `Open`.
    Reply = 4,
    /// Bytes: the stream's stdin or upload (host to daemon), stdout (daemon to host).
    Data = 5,
    /// Bytes: the stream's stderr (daemon to host).
    Stderr = 6,
    /// Empty: the sender will send nothing more on this stream but credit.
    Eof = 7,
    /// JSON [`ExitStatus`](super::ExitStatus): the stream's process ended.
    Exit = 8,
    /// `u32` BE: the receiver consumed this many more bytes; the sender may
    /// send that many more.
    Window = 9,
    /// JSON [`Reason`](super::Reason): abort the stream in both directions.
    Reset = 10,
}

impl Kind {
    /// Every kind, in byte order (tests and property generators use it).
    pub const ALL: [Kind; 10] = [
        Kind::Hello,
        Kind::Refuse,
        Kind::Open,
        Kind::Reply,
        Kind::Data,
        Kind::Stderr,
        Kind::Eof,
        Kind::Exit,
        Kind::Window,
        Kind::Reset,
    ];

    /// The kind a header byte names, if any.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| *kind as u8 == byte)
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Refuse => "refuse",
            Kind::Open => "open",
            Kind::Reply => "reply",
            Kind::Data => "data",
            Kind::Stderr => "stderr",
            Kind::Eof => "eof",
            Kind::Exit => "exit",
            Kind::Window => "window",
            Kind::Reset => "reset",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A frame that cannot be encoded or decoded. Either one means the byte stream
/// cannot be trusted any more: the connection must close.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("unknown frame kind {0:#04x} (is the peer speaking another protocol?)")]
    UnknownKind(u8),
    #[error("{kind} frame on stream {stream} is {length} bytes, over the {MAX_PAYLOAD}-byte cap")]
    TooLong { kind: Kind, stream: u32, length: usize },
}

/// One frame. The payload is at most [`MAX_PAYLOAD`] bytes: [`Frame::new`]
/// checks it, so every `Frame` can be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    kind: Kind,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// A frame, refused when the payload is over the cap.
    pub fn new(kind: Kind, stream: u32, payload: Vec<u8>) -> Result<Frame, FrameError> {
        if payload.len() > MAX_PAYLOAD {
            return Err(FrameError::TooLong { kind, stream, length: payload.len() });
        }
        Ok(Frame { kind, stream, payload })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn stream(&self) -> u32 {
        self.stream
    }

    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }

    /// The nine header bytes. Writers send them and then the payload, so a
    /// large payload is never copied just to prepend its header.
    pub fn header(&self) -> [u8; HEADER_LEN] {
        header(self.kind, self.stream, self.payload.len())
    }

    /// Appends header and payload to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.header());
        out.extend_from_slice(&self.payload);
    }
}

/// The nine header bytes of a frame of `len` payload bytes (`len` at most
/// [`MAX_PAYLOAD`], which callers have checked).
pub(super) fn header(kind: Kind, stream: u32, len: usize) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_PAYLOAD);
    let mut header = [0; HEADER_LEN];
    header[0] = kind as u8;
    header[1..5].copy_from_slice(&stream.to_be_bytes());
    // Fits: payloads are capped far below u32::MAX.
    header[5..9].copy_from_slice(&(len as u32).to_be_bytes());
    header
}

/// A `Reset` or `Refuse` frame; the message is cut to [`MAX_REASON`] bytes so
/// the frame always fits.
pub(super) fn reason_frame(kind: Kind, id: u32, mut message: String) -> Frame {
    if message.len() > MAX_REASON {
        let mut cut = MAX_REASON;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let payload = serde_json::to_vec(&Reason { message }).expect("a string always encodes");
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    Frame::new(kind, id, payload).expect("a cut reason fits in a frame")
}

/// Reassembles frames from a byte stream that arrives in arbitrary pieces.
///
/// Feed it either by reading into [`unfilled_mut`](Self::unfilled_mut) and
/// calling [`advance`](Self::advance) (no extra copy; what the link does), or
/// with [`push`](Self::push) from a slice. Call [`decode`](Self::decode) until
/// it returns `Ok(None)` before adding more bytes: only then is there
/// guaranteed room, because a buffer of [`MAX_FRAME`] bytes always holds a
/// complete frame.
///
/// After an error the decoder is not to be used again: the stream's framing is
/// lost and the connection must close.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Initialised bytes; `len()` is the usable size and never exceeds
    /// [`MAX_FRAME`]. Allocated with exact sizes, so `capacity() == len()`.
    buf: Vec<u8>,
    /// First byte not yet decoded.
    start: usize,
    /// One past the last byte received.
    end: usize,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed, or an
    /// error as soon as the header shows the frame is unacceptable.
    pub fn decode(&mut self) -> Result<Option<Frame>, FrameError> {
        let live = &self.buf[self.start..self.end];
        let Some(header) = live.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let kind = Kind::from_byte(header[0]).ok_or(FrameError::UnknownKind(header[0]))?;
        let stream = u32::from_be_bytes(header[1..5].try_into().expect("4 bytes"));
        let length = u32::from_be_bytes(header[5..9].try_into().expect("4 bytes")) as usize;
        if length > MAX_PAYLOAD {
            return Err(FrameError::TooLong { kind, stream, length });
        }
        let Some(payload) = live.get(HEADER_LEN..HEADER_LEN + length) else {
            return Ok(None);
        };
        let frame = Frame { kind, stream, payload: payload.to_vec() };
        self.start += HEADER_LEN + length;
        if self.start == self.end {
            // Empty again: the next read starts at the front, no compaction.
            self.start = 0;
            self.end = 0;
        }
        Ok(Some(frame))
    }

    /// Room to read into. Non-empty whenever the last `decode` returned
    /// `Ok(None)`: compacts or grows the buffer (never beyond [`MAX_FRAME`])
    /// when it is full.
    pub fn unfilled_mut(&mut self) -> &mut [u8] {
        if self.end == self.buf.len() {
            self.make_room();
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of [`unfilled_mut`](Self::unfilled_mut) as received.
    ///
    /// # Panics
    /// When `n` is more than that slice's length (a caller bug).
    pub fn advance(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "advance past the decoder's buffer");
        self.end += n;
    }

    /// Copies as much of `input` as there is room for and returns how much
    /// that was; decode, then push the rest.
    pub fn push(&mut self, input: &[u8]) -> usize {
        let room = self.unfilled_mut();
        let n = room.len().min(input.len());
        room[..n].copy_from_slice(&input[..n]);
        self.advance(n);
        n
    }

    /// Bytes received and not yet decoded (a partial frame after `Ok(None)`).
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Bytes the decoder has allocated; never more than [`MAX_FRAME`].
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    fn make_room(&mut self) {
        if self.start > 0 {
            // Decoded frames at the front: reuse their space for the tail.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return;
        }
        if self.buf.len() < MAX_FRAME {
            // Full of one partial frame, which (its header was checked, or
            // the header is not complete yet) fits in MAX_FRAME. `vec!` of
            // zeroes allocates exactly the size asked for, which keeps the
            // capacity bound exact, unlike `reserve`.
            let size = (self.buf.len() * 2).clamp(INITIAL_BUFFER, MAX_FRAME);
            let mut bigger = vec![0; size];
            bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = bigger;
        }
        // Otherwise the buffer holds MAX_FRAME bytes from a frame boundary,
        // which is a complete frame the caller has not decoded: no room.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(kind: Kind, stream: u32, payload: &[u8]) -> Frame {
        Frame::new(kind, stream, payload.to_vec()).unwrap()
    }

    fn encode_all(frames: &[Frame]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for frame in frames {
            frame.encode(&mut bytes);
        }
        bytes
    }

    /// Feeds `pieces` one after another, decoding everything available after
    /// each, and checks the memory bound on every step.
    fn decode_pieces<'a>(
        decoder: &mut Decoder,
        pieces: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<Frame>, FrameError> {
        let mut frames = Vec::new();
        for mut piece in pieces {
            loop {
                while let Some(frame) = decoder.decode()? {
                    frames.push(frame);
                }
                assert!(decoder.capacity() <= MAX_FRAME);
                if piece.is_empty() {
                    break;
                }
                let taken = decoder.push(piece);
                assert!(taken > 0, "no room after decode returned None");
                piece = &piece[taken..];
            }
        }
        Ok(frames)
    }

    #[test]
    fn frames_round_trip() {
        let frames = vec![
            frame(Kind::Hello, 0, br#"{"protocol":1}"#),
            frame(Kind::Open, 1, b"{}"),
            frame(Kind::Data, 1, &[0xff; 1000]),
            frame(Kind::Eof, 1, b""),
            frame(Kind::Window, 2, &7u32.to_be_bytes()),
        ];
        let mut decoder = Decoder::new();
        let decoded = decode_pieces(&mut decoder, [encode_all(&frames).as_slice()]).unwrap();
        assert_eq!(decoded, frames);
        assert_eq!(decoder.buffered(), 0);
    }

    #[test]
    fn header_layout_is_kind_then_big_endian_stream_and_length() {
        let header = frame(Kind::Data, 0x0102_0304, b"xyz").header();
        assert_eq!(header, [5, 1, 2, 3, 4, 0, 0, 0, 3]);
    }

    #[test]
    fn a_frame_split_at_every_byte_boundary_decodes_the_same() {
        let frames = vec![
            frame(Kind::Open, 3, br#"{"op":"echo"}"#),
            frame(Kind::Data, 3, &(0..=255).collect::<Vec<u8>>()),
            frame(Kind::Eof, 3, b""),
        ];
        let bytes = encode_all(&frames);
        for split in 0..=bytes.len() {
            let mut decoder = Decoder::new();
            let (head, tail) = bytes.split_at(split);
            let decoded = decode_pieces(&mut decoder, [head, tail]).unwrap();
            assert_eq!(decoded, frames, "split at {split}");
        }
    }

    #[test]
    fn a_frame_arriving_one_byte_at_a_time_decodes_the_same() {
        let frames = vec![frame(Kind::Data, 9, &[1; 40_000])];
        let bytes = encode_all(&frames);
        let mut decoder = Decoder::new();
        let decoded = decode_pieces(&mut decoder, bytes.chunks(1)).unwrap();
        assert_eq!(decoded, frames);
    }

    #[test]
    fn a_largest_frame_fits_and_the_buffer_stops_at_max_frame() {
        let frames = vec![frame(Kind::Data, 1, &[7; MAX_PAYLOAD]), frame(Kind::Data, 1, &[8; MAX_PAYLOAD])];
        let mut decoder = Decoder::new();
        let bytes = encode_all(&frames);
        let decoded = decode_pieces(&mut decoder, bytes.chunks(10_000)).unwrap();
        assert_eq!(decoded, frames);
        assert_eq!(decoder.capacity(), MAX_FRAME);
    }

    #[test]
    fn an_oversize_length_is_refused_before_any_room_is_made_for_it() {
        for length in [MAX_PAYLOAD as u32 + 1, u32::MAX] {
            let mut decoder = Decoder::new();
            let mut header = vec![Kind::Data as u8, 0, 0, 0, 1];
            header.extend_from_slice(&length.to_be_bytes());
            decoder.push(&header);
            assert_eq!(
                decoder.decode(),
                Err(FrameError::TooLong { kind: Kind::Data, stream: 1, length: length as usize })
            );
            assert!(decoder.capacity() <= INITIAL_BUFFER);
        }
    }

    #[test]
    fn encoding_an_oversize_payload_is_refused() {
        let err = Frame::new(Kind::Data, 1, vec![0; MAX_PAYLOAD + 1]).unwrap_err();
        assert!(err.to_string().contains("over the 262144-byte cap"), "{err}");
    }

    #[test]
    fn an_unknown_kind_is_refused_naming_the_byte() {
        for byte in [0u8, 11, 0xff] {
            let mut decoder = Decoder::new();
            decoder.push(&[byte, 0, 0, 0, 0, 0, 0, 0, 0]);
            let err = decoder.decode().unwrap_err();
            assert_eq!(err, FrameError::UnknownKind(byte));
            assert!(err.to_string().contains(&format!("{byte:#04x}")), "{err}");
        }
    }

    #[test]
    fn every_kind_byte_maps_back_to_its_kind() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_byte(kind as u8), Some(kind));
        }
    }

    fn any_frame() -> impl Strategy<Value = Frame> {
        (0..Kind::ALL.len(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..3000))
            .prop_map(|(kind, stream, payload)| Frame::new(Kind::ALL[kind], stream, payload).unwrap())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_nor_exceed_the_cap(
            bytes in prop::collection::vec(any::<u8>(), 0..4096),
            piece in 1usize..600,
        ) {
            let mut decoder = Decoder::new();
            // An error is a fine outcome for garbage; only a panic or an
            // allocation over the cap is a failure.
            let _ = decode_pieces(&mut decoder, bytes.chunks(piece));
            prop_assert!(decoder.capacity() <= MAX_FRAME);
        }

        #[test]
        fn arbitrary_headers_never_exceed_the_cap(
            kind in 1u8..=10,
            length in any::<u32>(),
            filler in 0usize..300_000,
        ) {
            // Valid kinds with any length, followed by up to a frame's worth
            // of bytes: the decoder must refuse or wait, never over-allocate.
            let mut bytes = vec![kind, 0, 0, 0, 1];
            bytes.extend_from_slice(&length.to_be_bytes());
            bytes.resize(HEADER_LEN + filler, 0xaa);
            let mut decoder = Decoder::new();
            let _ = decode_pieces(&mut decoder, bytes.chunks(8192));
            prop_assert!(decoder.capacity() <= MAX_FRAME);
        }

        #[test]
        fn arbitrary_frames_round_trip_in_arbitrary_pieces(
            frames in prop::collection::vec(any_frame(), 0..8),
            piece in 1usize..5000,
        ) {
            let bytes = encode_all(&frames);
            let mut decoder = Decoder::new();
            let decoded = decode_pieces(&mut decoder, bytes.chunks(piece)).unwrap();
            prop_assert_eq!(decoded, frames);
            prop_assert_eq!(decoder.buffered(), 0);
        }
    }
}
