"""seq2seq_translation in rnnkit: the port of original.py (PyTorch's translation tutorial with
a GRU encoder, an attention decoder stepping one token at a time and teacher forcing), from its
initial weights, with no backward code: the step records on ``rk.GradientTape``.

What changed from the PyTorch program: ``nn.Module`` classes are plain classes whose
``forward`` is ``__call__``; ``nn.GRU`` is ``rk.GRU(..., return_sequences=True,
return_state=True, reset_after=True)`` (PyTorch's GRU equations; the state is ``(B, H)``, not
``(1, B, H)``); tensor arithmetic is ``rk.ops`` (``ops.add`` where PyTorch writes ``+``: a NumPy
operator is not recorded); ``loss.backward()`` / ``optimizer.step()`` are ``tape.gradient`` and
``apply_gradients``. Lines ending in ``# harness`` are the harness; tools/porting_report.py
leaves them out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
import json  # harness

import numpy as np
import rnnkit as rk
from rnnkit import ops

from corpus import PAIRS  # harness

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness

SOS_token = 0
EOS_token = 1


class Lang:
    def __init__(self, name):
        self.name = name
        self.word2index = {}
        self.word2count = {}
        self.index2word = {0: "SOS", 1: "EOS"}
        self.n_words = 2

    def addSentence(self, sentence):
        for word in sentence.split(' '):
            self.addWord(word)

    def addWord(self, word):
        if word not in self.word2index:
            self.word2index[word] = self.n_words
            self.word2count[word] = 1
            self.index2word[self.n_words] = word
            self.n_words += 1
        else:
            self.word2count[word] += 1


MAX_LENGTH = 10


def prepareData(lang1, lang2):
    pairs = [list(p) for p in PAIRS]  # harness: readLangs and filterPairs
    input_lang, output_lang = Lang(lang1), Lang(lang2)
    for pair in pairs:
        input_lang.addSentence(pair[0])
        output_lang.addSentence(pair[1])
    return input_lang, output_lang, pairs


def weights(*layers):
    return [(layer, name) for layer in layers for name in layer.trainable_names]


class EncoderRNN:
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        self.hidden_size = hidden_size

        self.embedding = rk.Embedding(input_size, hidden_size)
        self.gru = rk.GRU(hidden_size, return_sequences=True, return_state=True, reset_after=True)
        self.dropout = rk.Dropout(dropout_p)

    def __call__(self, input, training=True):
        embedded = self.dropout(self.embedding(input), training=training)
        output, hidden = self.gru(embedded)
        return output, hidden

    def trainable_weights(self):
        return weights(self.embedding, self.gru)


class BahdanauAttention:
    def __init__(self, hidden_size):
        self.Wa = rk.Dense(hidden_size)
        self.Ua = rk.Dense(hidden_size)
        self.Va = rk.Dense(1)

    def __call__(self, query, keys):
        scores = self.Va(ops.tanh(ops.add(self.Wa(query), self.Ua(keys))))
        scores = ops.expand_dims(ops.squeeze(scores, 2), 1)

        weights = ops.softmax(scores, axis=-1)
        context = ops.matmul(weights, keys)

        return context, weights


class AttnDecoderRNN:
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        self.embedding = rk.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = rk.GRU(hidden_size, return_sequences=True, return_state=True, reset_after=True)
        self.out = rk.Dense(output_size)
        self.dropout = rk.Dropout(dropout_p)

    def __call__(self, encoder_outputs, encoder_hidden, target_tensor=None, training=True):
        batch_size = encoder_outputs.shape[0]
        decoder_input = np.full((batch_size, 1), SOS_token, dtype=np.int64)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []

        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs, training
            )
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)

            if target_tensor is not None:
                decoder_input = target_tensor[:, i:i + 1]
            else:
                decoder_input = ops.stop_gradient(ops.argmax(decoder_output, axis=-1))

        decoder_outputs = ops.concatenate(decoder_outputs, axis=1)
        decoder_outputs = ops.log_softmax(decoder_outputs, axis=-1)
        attentions = ops.concatenate(attentions, axis=1)

        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs, training=False):
        embedded = self.dropout(self.embedding(input), training=training)

        query = ops.expand_dims(hidden, 1)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = ops.concatenate((embedded, context), axis=2)

        output, hidden = self.gru(input_gru, initial_state=hidden)
        output = self.out(output)

        return output, hidden, attn_weights

    def trainable_weights(self):
        a = self.attention
        return weights(self.embedding, a.Wa, a.Ua, a.Va, self.gru, self.out)


def indexesFromSentence(lang, sentence):
    return [lang.word2index[word] for word in sentence.split(' ')]


def get_dataloader(batch_size):
    input_lang, output_lang, pairs = prepareData('fra', 'eng')

    n = len(pairs)
    input_ids = np.zeros((n, MAX_LENGTH), dtype=np.int32)
    target_ids = np.zeros((n, MAX_LENGTH), dtype=np.int32)

    for idx, (inp, tgt) in enumerate(pairs):
        inp_ids = indexesFromSentence(input_lang, inp)
        tgt_ids = indexesFromSentence(output_lang, tgt)
        inp_ids.append(EOS_token)
        tgt_ids.append(EOS_token)
        input_ids[idx, :len(inp_ids)] = inp_ids
        target_ids[idx, :len(tgt_ids)] = tgt_ids

    train_dataloader = [(input_ids[i:i + batch_size], target_ids[i:i + batch_size]) for i in range(0, n, batch_size)]
    return input_lang, output_lang, train_dataloader


def nll_loss(logp, target):
    return ops.negative(ops.mean(ops.take_along_axis(logp, target[:, None], axis=1)))


LOSSES = []  # harness


def train_epoch(dataloader, encoder, decoder, encoder_optimizer,
                decoder_optimizer, criterion):

    total_loss = 0
    for data in dataloader:
        input_tensor, target_tensor = data

        with rk.GradientTape() as tape:
            encoder_outputs, encoder_hidden = encoder(input_tensor)
            decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)

            loss = criterion(
                ops.reshape(decoder_outputs, (-1, decoder_outputs.shape[-1])),
                target_tensor.reshape(-1)
            )
        enc_w, dec_w = encoder.trainable_weights(), decoder.trainable_weights()
        grads = tape.gradient(loss, enc_w + dec_w)

        encoder_optimizer.apply_gradients(zip(grads[:len(enc_w)], enc_w))
        decoder_optimizer.apply_gradients(zip(grads[len(enc_w):], dec_w))

        total_loss += float(loss)
        LOSSES.append(float(loss))  # harness

    return total_loss / len(dataloader)


def train(train_dataloader, encoder, decoder, n_epochs, learning_rate=0.001):
    encoder_optimizer = rk.Adam(learning_rate=learning_rate, epsilon=1e-8)
    decoder_optimizer = rk.Adam(learning_rate=learning_rate, epsilon=1e-8)
    criterion = nll_loss

    for epoch in range(1, n_epochs + 1):
        loss = train_epoch(train_dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion)


def load_torch_weights(encoder, decoder, state):  # harness: the weights original.py wrote
    e, d, a = "encoder.", "decoder.", "decoder.attention."  # harness
    hidden = state[e + "embedding.weight"].shape[1]  # harness
    for layer, key in ((encoder.embedding, e), (decoder.embedding, d)):  # harness
        layer.build((None, None))  # harness
        layer.set_weight("embeddings", state[key + "embedding.weight"])  # harness
    for layer, key in ((encoder.gru, e), (decoder.gru, d)):  # harness
        rk.io.from_torch_state(layer, state, prefix=key + "gru.")  # harness
    for layer, key in ((decoder.attention.Wa, a + "Wa."), (decoder.attention.Ua, a + "Ua."),  # harness
                       (decoder.attention.Va, a + "Va."), (decoder.out, d + "out.")):  # harness
        layer.build((None, None, hidden))  # harness
        layer.set_weights(state[key + "weight"].T, state[key + "bias"])  # harness


if __name__ == "__main__":  # harness
    from safetensors.numpy import load_file  # harness
    hidden_size = 16 if TINY else 64  # harness: the tutorial's 128
    batch_size = 4  # harness: the tutorial's 32, for a 16-pair corpus
    input_lang, output_lang, train_dataloader = get_dataloader(batch_size)
    encoder = EncoderRNN(input_lang.n_words, hidden_size, dropout_p=0.0)  # harness: dropout 0
    decoder = AttnDecoderRNN(hidden_size, output_lang.n_words, dropout_p=0.0)  # harness: dropout 0
    load_torch_weights(encoder, decoder, load_file(os.path.join(OUT, "translate.safetensors")))  # harness
    train(train_dataloader, encoder, decoder, 2 if TINY else 10, learning_rate=0.01)  # harness: 80 epochs, lr 0.001
    with open(os.path.join(OUT, "translate.port.json"), "w") as f:  # harness
        json.dump(LOSSES, f)  # harness
