//! Stateright models of hilock (filled by the model-checking issue).
