//! gemini-emulator
