//! Chat templates against known prompts: the fixture VL template (also in
//! every fixture GGUF) and SmolLM2's template as transformers renders it.

mod support;

use ats_core::gguf::GgufFile;
use ats_core::{ChatMessage, ChatTemplate, ContentPart, Tokenizer};

const VL_PROMPT: &str = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>\
Describe this image.<|im_end|>\n<|im_start|>assistant\n";

fn describe_image() -> Vec<ChatMessage> {
    vec![ChatMessage::new(
        "user",
        vec![
            ContentPart::Image,
            ContentPart::Text("Describe this image.".into()),
        ],
    )]
}

#[test]
fn fixture_template_renders_the_vl_prompt() {
    let src =
        std::fs::read_to_string(support::fixtures().join("tokenizer/chat_template.jinja")).unwrap();
    let t = ChatTemplate::new(src, "", "<|im_end|>").unwrap();
    assert_eq!(t.render(&describe_image(), true).unwrap(), VL_PROMPT);
    // Text-only content takes the template's string branch.
    assert_eq!(
        t.render(&[ChatMessage::text("user", "Hi")], false).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n"
    );
}

/// The prompt from each VL GGUF's own template, with the image pad repeated
/// once per image token, tokenizes to the reference `input_ids`.
#[test]
fn vl_gguf_prompt_matches_reference_ids() {
    for dir in ["qwen2_vl", "qwen2_5_vl"] {
        let d = support::fixtures().join(dir);
        let f = GgufFile::open(d.join(format!("{dir}-f32.gguf"))).unwrap();
        let t = ChatTemplate::from_gguf(&f.metadata).unwrap();
        assert!(!t.is_fallback());
        let prompt = t.render(&describe_image(), true).unwrap();
        assert_eq!(prompt, VL_PROMPT, "{dir}");

        let tok = Tokenizer::from_gguf(&f.metadata).unwrap();
        let bytes = std::fs::read(d.join("reference.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        for (image, n_pad) in [("small", 48), ("large", 126)] {
            let want: Vec<u32> = st
                .tensor(&format!("{image}.input_ids"))
                .unwrap()
                .data()
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
                .collect();
            let expanded = prompt.replace("<|image_pad|>", &"<|image_pad|>".repeat(n_pad));
            let ids = tok.encode(&expanded, true, true).unwrap();
            assert_eq!(ids, want, "{dir} {image}");
        }
    }
}

/// SmolLM2-135M-Instruct's template, as stored in its GGUF.
const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fn check_smollm2(t: &ChatTemplate) {
    let msgs = [
        ChatMessage::text("system", "You are a concise assistant."),
        ChatMessage::text("user", "What is the capital of France?"),
    ];
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        "<|im_start|>system\nYou are a concise assistant.<|im_end|>\n\
         <|im_start|>user\nWhat is the capital of France?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    // Without a system message the template supplies its own.
    let msgs = [
        ChatMessage::text("user", "Hi"),
        ChatMessage::text("assistant", "Hello!"),
        ChatMessage::text("user", "Bye"),
    ];
    assert_eq!(
        t.render(&msgs, false).unwrap(),
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\
         <|im_start|>user\nBye<|im_end|>\n"
    );
    // Text templates cannot take an image: an error, not a silent drop.
    assert!(t.render(&describe_image(), true).is_err());
}

#[test]
fn smollm2_template_renders_like_transformers() {
    check_smollm2(&ChatTemplate::new(SMOLLM2_TEMPLATE, "<|im_start|>", "<|im_end|>").unwrap());
    let Some(path) = support::smollm2() else {
        return;
    };
    let f = GgufFile::open(path).unwrap();
    let t = ChatTemplate::from_gguf(&f.metadata).unwrap();
    assert!(!t.is_fallback());
    assert_eq!(t.source(), SMOLLM2_TEMPLATE);
    check_smollm2(&t);
}

/// A long conversation stays far inside the default fuel.
#[test]
fn long_conversation_fits_the_default_budget() {
    let t = ChatTemplate::new(SMOLLM2_TEMPLATE, "", "").unwrap();
    let long = "word ".repeat(2000);
    let msgs: Vec<ChatMessage> = (0..400)
        .map(|i| ChatMessage::text(if i % 2 == 0 { "user" } else { "assistant" }, long.clone()))
        .collect();
    let out = t.render(&msgs, true).unwrap();
    assert!(out.len() > 400 * 10_000);
}
