// Session affinity for memra-serve replicas behind nginx (njs): the key
// that keeps one conversation on one replica, so that its prefix cache
// holds the conversation's earlier turns. Used by memra-lb.conf:
//
//   js_import memra from memra_affinity.js;
//   location /v1/ { js_content memra.route; }
//
// The key, in order of preference:
//   1. the request's "prompt_cache_key" (OpenAI's field for this purpose);
//   2. a hash of the conversation's head: the system prompt ("system" or
//      "instructions") and the messages up to the first user turn
//      ("messages" of /v1/chat/completions and /v1/messages, "input" of
//      /v1/responses), which every later turn repeats unchanged;
//   3. a hash of the first 1,024 characters of a /v1/completions "prompt".
// A request with none of these (or a body that is not JSON) has no key and
// goes to the least busy replica.
var crypto = require('crypto');

var PROMPT_HEAD = 1024;

function headOf(items) {
    if (!Array.isArray(items))
        return items;
    var head = [];
    for (var i = 0; i < items.length; i++) {
        head.push(items[i]);
        if (items[i] && items[i].role === 'user')
            break;
    }
    return head;
}

function affinityKey(text) {
    if (!text)
        return '';
    var b;
    try {
        b = JSON.parse(text);
    } catch (e) {
        return '';
    }
    if (b === null || typeof b !== 'object')
        return '';
    if (typeof b.prompt_cache_key === 'string' && b.prompt_cache_key.length > 0)
        return 'k:' + b.prompt_cache_key;
    var head;
    if (Array.isArray(b.messages))
        head = [b.system === undefined ? null : b.system, headOf(b.messages)];
    else if (b.input !== undefined)
        head = [b.instructions === undefined ? null : b.instructions, headOf(b.input)];
    else if (typeof b.prompt === 'string')
        head = b.prompt.substring(0, PROMPT_HEAD);
    else
        return '';
    return 'c:' + crypto.createHash('sha1').update(JSON.stringify(head)).digest('hex');
}

// js_content handler: the body has been read; name the key and hand the
// request to the upstream that honours it.
function route(r) {
    var key = affinityKey(r.requestText);
    r.variables.memra_key = key;
    r.internalRedirect(key ? '@memra_affine' : '@memra_least');
}

export default {route: route, affinityKey: affinityKey};
